"""Drift monitoring: count what each model version sees in its reference's bins (docs/drift.md)."""
