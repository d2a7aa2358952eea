"""The drift reference's public entry point for training code: ``log_reference(frame)``.

The implementation lives with the export that reads it (builder/export/drift_reference.py);
this path is kept because training scripts import it."""

from builder.export.drift_reference import RUN_ARTIFACT, log_reference

__all__ = ["RUN_ARTIFACT", "log_reference"]
