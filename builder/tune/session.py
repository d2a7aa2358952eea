"""Triton for tuning: a private copy of one model, reloaded once per candidate.

The server runs on free ports with ``model_control_mode="explicit"`` over a temp repository
holding a copy of the model's folder, so the user's repository (and any server serving it) is
never touched while candidates are tried. A candidate is applied by rewriting the copy's
``config.pbtxt`` and asking Triton to load the model again; Triton keeps the old config
serving if a load fails, so a failed load is checked, not assumed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from builder.repository.triton_config import ModelConfig, to_pbtxt
from builder.runtime.server import ServerOptions, TritonServer
from builder.tune.load import Plan
from builder.tune.loadgen import RequestInput, measure
from builder.tune.search import CandidateResult, failed, scored
from builder.tune.space import Knobs, apply

_LOAD_TIMEOUT_S = 120.0
REPORT_FOLDER = "tune"


class TuneSession:
    """Context manager: a started server over a copy of ``model_dir``; ``run()`` one candidate."""

    def __init__(
        self,
        model_dir: Path,
        config: ModelConfig,
        inputs: list[RequestInput],
        *,
        concurrency: tuple[int, ...],
        measure_s: float,
        warmup_s: float,
        budget_ms: float,
    ) -> None:
        self.name = model_dir.name
        self.config = config
        self.inputs = inputs
        self.concurrency = concurrency
        self.measure_s = measure_s
        self.warmup_s = warmup_s
        self.budget_ms = budget_ms
        self._tmp = tempfile.TemporaryDirectory(prefix="builder-tune-")
        self._repo = Path(self._tmp.name) / "repo"
        # Earlier tune reports are not part of the model.
        shutil.copytree(model_dir, self._repo / self.name, ignore=shutil.ignore_patterns(REPORT_FOLDER))
        self._config_path = self._repo / self.name / "config.pbtxt"
        self.server = TritonServer(
            self._repo,
            ServerOptions(model_control_mode="explicit"),
            log_path=Path(self._tmp.name) / "tritonserver.log",
        )

    def __enter__(self) -> TuneSession:
        self.server.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.stop()
        self._tmp.cleanup()

    def _load(self, knobs: Knobs) -> str | None:
        """Load the candidate's config; the reason when Triton refuses it."""
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        self._config_path.write_text(to_pbtxt(apply(self.config, knobs)))
        client = grpcclient.InferenceServerClient(self.server.grpc_url)
        try:
            client.load_model(self.name, client_timeout=_LOAD_TIMEOUT_S)
            if not client.is_model_ready(self.name, client_timeout=10):
                return "not ready after load"
        except InferenceServerException as exc:
            return f"Triton did not load it: {exc.message() or exc}"
        finally:
            client.close()
        return None

    def run(self, index: int, knobs: Knobs) -> CandidateResult:
        """Load ``knobs`` and measure it at every concurrency level."""
        reason = self._load(knobs)
        if reason is not None:
            return failed(index, knobs, reason)
        from tritonclient.utils import InferenceServerException

        error: str | None = None
        measurements = []
        try:
            for level in self.concurrency:
                plan = Plan(level, self.warmup_s, self.measure_s)
                measurements.append(measure(self.server.grpc_url, self.name, self.inputs, plan))
        except* InferenceServerException as group:
            error = f"inference failed: {group.exceptions[0]}"
        if error is not None:
            return failed(index, knobs, error)
        return scored(index, knobs, measurements, self.budget_ms)
