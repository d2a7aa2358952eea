"""The export's one context, seen from outside: the ensemble is planned before any conversion
work, and the final ONNX graph gets one onnxruntime session that parity, the drift reference
and the rest share (builder/export/steps.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builder.errors import UsageError
from builder.export import ExportRequest, export_model
from support import models

pytestmark = pytest.mark.integration  # a real MLflow registry (SQLite) or real servers


@pytest.fixture(scope="module")
def plain_model(mlflow_registry: str) -> str:
    # Its run logs no serving/ensemble.json and no serving/steps/, and takes one float matrix:
    # an ensemble of it needs a spec the run lacks.
    models.sklearn_classifier("context-plain", pip_requirements=["scikit-learn"])
    return "models:/context-plain@champion"


def test_a_missing_ensemble_spec_is_refused_before_any_conversion(plain_model: str, tmp_path: Path) -> None:
    started: list[str] = []
    repo = tmp_path / "repo"
    with pytest.raises(UsageError) as refused:
        export_model(ExportRequest(plain_model, repo, ensemble=True), progress=started.append)
    assert "has no readable serving/ensemble.json" in refused.value.message
    assert "--ensemble-spec FILE" in (refused.value.hint or "")
    assert started[-1] == "plan the ensemble"  # the step that refused
    assert not {"load native model", "convert to ONNX", "check parity", "compute drift reference"} & set(
        started
    )
    assert not repo.exists()


def test_the_final_graph_gets_one_session(
    plain_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime as ort

    from builder.export import drift_reference

    made: list[bytes] = []
    real = ort.InferenceSession

    def counting(model: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(model if isinstance(model, bytes) else Path(model).read_bytes())
        return real(model, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", counting)
    monkeypatch.setattr(drift_reference, "_BATCH", 64)  # the reference scores its rows in 5 calls
    rows = tmp_path / "rows.parquet"
    models.dataset(300, seed=5)[0].to_parquet(rows)
    repo = tmp_path / "repo"
    result = export_model(ExportRequest(plain_model, repo, reference=rows))
    assert [s.name for s in result.steps if s.name == "compute drift reference"]
    final = (repo / "context-plain" / "1" / "model.onnx").read_bytes()
    # One for the final graph (parity, then the drift reference's batches), one for the probe
    # that re-declares the converter's outputs (builder/convert/base.py normalize_outputs).
    assert made.count(final) == 1
    assert len(made) == 2
