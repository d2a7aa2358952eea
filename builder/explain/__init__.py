"""Exact SHAP explanations served beside an exported model (docs/explain.md)."""
