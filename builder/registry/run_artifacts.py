"""Artifacts of a model's training run (its ensemble spec, serving steps, drift reference),
downloaded into the export's scratch folder.

One helper for the three: list (when the artifact is optional), download, and turn MLflow's and
the filesystem's errors into a one-line UsageError that says which artifact and why. The
destination is always a folder under the export's workdir: without ``dst_path`` MLflow downloads
into a fresh temp folder it never removes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.errors import UsageError


@dataclass(frozen=True)
class Refusal:
    """What the caller says when the artifact cannot be read."""

    message: str
    hint: str | None = None
    reason: bool = True  # append MLflow's (or the OS's) own words: ``message: <error>``

    def error(self, exc: BaseException) -> UsageError:
        return UsageError(f"{self.message}: {exc}" if self.reason else self.message, hint=self.hint)


def fetch_run_artifact(
    run_id: str, path: str, dst: Path, refusal: Refusal, *, optional: bool = False
) -> Path | None:
    """The run's artifact ``path`` (a file or a folder), downloaded under ``dst``; ``optional``:
    None where the run logged nothing there (its parent folder is listed first)."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        if optional:
            folder = path.rpartition("/")[0]
            listed = {f.path for f in MlflowClient().list_artifacts(run_id, folder or None)}
            if path not in listed:
                return None
        dst.mkdir(parents=True, exist_ok=True)
        return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=str(dst)))
    except (MlflowException, OSError) as exc:
        raise refusal.error(exc) from exc
