"""``builder export``: registry model -> ONNX -> parity -> Triton model repository.

One context (context.py) filled in by a short list of steps (steps.py), run and timed by
run.py; describe.py says what is written for the model (its ensemble's: builder/ensemble/),
drift_reference.py computes the drift reference. What callers import is re-exported here.
"""

from builder.export.context import FORMATS, ExportRequest, ExportResult, StepStatus
from builder.export.run import WORKDIR_PREFIX, export_model, export_workdir, remove_stale_workdirs

__all__ = [
    "FORMATS",
    "WORKDIR_PREFIX",
    "ExportRequest",
    "ExportResult",
    "StepStatus",
    "export_model",
    "export_workdir",
    "remove_stale_workdirs",
]
