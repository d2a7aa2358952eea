"""Drift reference statistics (docs/drift.md section 1): the bins `builder export` records equal an
independent pandas/numpy computation written here, and the export records them (metadata.json
``drift``, config parameter ``drift.reference``), warns when the run has none, and refuses a bad
reference file with one line and its exit code, writing nothing."""

from __future__ import annotations

import bisect
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from onnx import TensorProto, helper

from builder.errors import UsageError
from builder.export.drift_reference import Drift, compute_reference, prediction_stats
from builder.kinds import ModelKind
from builder.parity.compare import GraphSession
from builder.registry.signature import Column, ModelInputs
from builder.tensors import TensorSpec
from support import models
from tests.builder import helpers

pytestmark = pytest.mark.integration  # a real MLflow registry (SQLite) or real servers

DECILES = [k / 10 for k in range(1, 10)]
ONNX_TYPES = {
    "float32": TensorProto.FLOAT,
    "int64": TensorProto.INT64,
    "string": TensorProto.STRING,
    "bool": TensorProto.BOOL,
}


# --- the independent computation: what docs/drift.md says, in plain pandas/numpy -------------------


def expect_numeric(name: str, series: pd.Series, *, served_float32: bool = True) -> dict[str, Any]:
    present = series.dropna().to_numpy(dtype=np.float64)
    if served_float32:  # binned as served
        present = present.astype(np.float32).astype(np.float64)
    if present.size == 0:
        return {
            "name": name,
            "kind": "numeric",
            "edges": [],
            "counts": [0],
            "nulls": int(series.isna().sum()),
        }
    edges = sorted({float(q) for q in np.quantile(present, DECILES)})
    counts = [0] * (len(edges) + 1)
    for x in present:
        counts[bisect.bisect_right(edges, x)] += 1
    return {
        "name": name,
        "kind": "numeric",
        "edges": edges,
        "counts": counts,
        "nulls": int(series.isna().sum()),
    }


def expect_categorical(name: str, series: pd.Series, *, strings: bool) -> dict[str, Any]:
    if strings:
        series = series.mask(series == "")
    counts = series.dropna().value_counts()
    ranked = sorted(((_plain(k), int(v)) for k, v in counts.items()), key=lambda kv: (-kv[1], str(kv[0])))
    top = ranked[:20]
    return {
        "name": name,
        "kind": "categorical",
        "categories": [k for k, _ in top],
        "counts": [v for _, v in top] + [int(counts.sum()) - sum(v for _, v in top)],
        "nulls": int(series.isna().sum()),
    }


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def as_gateway_reads(drift: Drift) -> dict[str, Any]:
    text = drift.parameter()
    assert text is not None
    return json.loads(text)


# --- synthetic inputs --------------------------------------------------------------------------------


def columns_inputs(columns: list[tuple[str, str]]) -> ModelInputs:
    return ModelInputs(
        layout="columns",
        tensors=tuple(TensorSpec(name=n, dtype=d, shape=(-1, 1)) for n, d in columns),
        columns=tuple(Column(n, d) for n, d in columns),
    )


def passthrough_graph(inputs: ModelInputs) -> GraphSession:
    """A graph taking every input and answering the first one (a model of kind "other"), as
    the export hands it to the reference: its one session."""
    first = inputs.tensors[0]
    graph = helper.make_graph(
        [helper.make_node("Identity", [first.name], ["out"])],
        "passthrough",
        [
            helper.make_tensor_value_info(t.name, ONNX_TYPES[t.dtype], [None, t.shape[1]])
            for t in inputs.tensors
        ],
        [helper.make_tensor_value_info("out", ONNX_TYPES[first.dtype], [None, first.shape[1]])],
    )
    return GraphSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))


def mixed_frame() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    # 25 cities, in runs of three with equal counts (so the top-20 cut falls inside a tie), named so
    # that frequency order, insertion order and string order all differ; plus "" and None (nulls).
    cities: list[Any] = []
    for i in range(25):
        cities += [f"city-{(i * 7) % 25:02d}"] * (30 - (i // 3) * 2)
    cities += [""] * 15 + [None] * 10
    rows = len(cities)
    amount = rng.lognormal(3.0, 1.0, rows)
    amount[rng.random(rows) < 0.1] = np.nan
    frame = pd.DataFrame(
        {
            "amount": amount,
            "constant": np.full(rows, 3.5),
            "n_items": rng.integers(0, 5, rows).astype(np.int64),
            "city": cities,
            "flag": rng.random(rows) < 0.3,
            "ignored": rng.random(rows),  # not a model column
        }
    )
    return frame.sample(frac=1.0, random_state=3).reset_index(drop=True)


MIXED = [
    ("amount", "float32"),
    ("constant", "float32"),
    ("n_items", "int64"),
    ("city", "string"),
    ("flag", "bool"),
]


def test_feature_bins_equal_an_independent_computation() -> None:
    frame = mixed_frame()
    inputs = columns_inputs(MIXED)
    ref = compute_reference(frame, inputs, ModelKind("other"), passthrough_graph(inputs), "mixed.parquet")
    got = as_gateway_reads(Drift(ref))

    assert got["format"] == 1 and got["rows"] == len(frame) and got["source"] == "mixed.parquet"
    assert "prediction" not in got  # kind "other": nothing to bin
    by_name = {f["name"]: f for f in got["features"]}
    assert list(by_name) == [n for n, _ in MIXED]  # signature order, "ignored" left out
    assert by_name["amount"] == expect_numeric("amount", frame.amount)
    assert by_name["amount"]["nulls"] > 0
    assert by_name["constant"] == {
        "name": "constant",
        "kind": "numeric",
        "edges": [3.5],
        "counts": [0, len(frame)],
        "nulls": 0,
    }
    assert by_name["n_items"] == expect_numeric("n_items", frame.n_items, served_float32=False)
    assert len(by_name["n_items"]["edges"]) < 9  # repeated deciles collapse to distinct edges
    city = expect_categorical("city", frame.city, strings=True)
    assert by_name["city"] == city
    assert len(city["categories"]) == 20 and city["counts"][-1] > 0 and city["nulls"] == 25
    assert by_name["flag"] == expect_categorical("flag", frame.flag, strings=False)
    assert set(by_name["flag"]["categories"]) == {True, False}


def test_more_than_20000_rows_are_sampled_the_same_way_every_time() -> None:
    frame = pd.DataFrame({"x": np.random.default_rng(1).normal(size=25_000)})
    inputs = ModelInputs(
        layout="matrix", tensors=(TensorSpec("input", "float32", (-1, 1)),), columns=(Column("x", "float32"),)
    )
    first = compute_reference(frame, inputs, ModelKind("other"), passthrough_graph(inputs), "big")
    again = compute_reference(frame, inputs, ModelKind("other"), passthrough_graph(inputs), "big")
    (x,) = first["features"]
    assert first["rows"] == 20_000 and sum(x["counts"]) + x["nulls"] == 20_000
    assert first == again


def test_no_value_at_all_is_one_empty_bin() -> None:
    frame = pd.DataFrame({"x": [np.nan] * 4, "s": ["", None, "", np.nan]})
    inputs = columns_inputs([("x", "float32"), ("s", "string")])
    ref = compute_reference(frame, inputs, ModelKind("other"), passthrough_graph(inputs), "empty")
    assert ref["features"] == [
        {"name": "x", "kind": "numeric", "edges": [], "counts": [0], "nulls": 4},
        {"name": "s", "kind": "categorical", "categories": [], "counts": [0], "nulls": 4},
    ]


@pytest.mark.parametrize(
    ("column", "values"),
    [("amount", ["1.5", "2.5"]), ("city", [1, 2]), ("n_items", [1.5, 2.0]), ("flag", ["yes", "no"])],
)
def test_a_column_of_the_wrong_type_is_refused_by_name(column: str, values: list[Any]) -> None:
    frame = pd.DataFrame(
        {
            "amount": [1.0, 2.0],
            "constant": [1.0, 1.0],
            "n_items": [1, 2],
            "city": ["a", "b"],
            "flag": [True, False],
        }
    )
    frame[column] = values
    inputs = columns_inputs(MIXED)
    with pytest.raises(UsageError) as raised:
        compute_reference(frame, inputs, ModelKind("other"), passthrough_graph(inputs), "bad.parquet")
    assert f"column {column!r}" in raised.value.message and dict(MIXED)[column] in raised.value.message


def test_prediction_bins_by_model_kind() -> None:
    rng = np.random.default_rng(2)
    probs = rng.dirichlet([1.0, 1.0], 300).astype(np.float32)
    binary = prediction_stats(
        ModelKind.classifier([0, 1]), {"label": probs.argmax(1)[:, None], "probabilities": probs}
    )
    assert binary == expect_numeric("score", pd.Series(probs[:, 1]))

    # Categories are every class in the model's order, the never-predicted one included.
    labels = rng.choice(["medium", "high"], 300, p=[0.7, 0.3]).astype(object)[:, None]
    multi = prediction_stats(
        ModelKind.classifier(["low", "medium", "high"]), {"label": labels, "probabilities": probs}
    )
    counts = pd.Series(labels.ravel()).value_counts()
    assert multi == {
        "name": "label",
        "kind": "categorical",
        "categories": ["low", "medium", "high"],
        "counts": [0, int(counts["medium"]), int(counts["high"]), 0],
        "nulls": 0,
    }

    values = rng.normal(10, 3, (300, 1)).astype(np.float32)
    assert prediction_stats(ModelKind.regressor(), {"prediction": values}) == expect_numeric(
        "value", pd.Series(values.ravel())
    )
    assert prediction_stats(ModelKind("other"), {"out": values}) is None


# --- through `builder export`, on a real registry ----------------------------------------------------


def config_parameters(model_dir: Path) -> dict[str, str]:
    from builder.repository.triton_config import parse_pbtxt

    config = parse_pbtxt((model_dir / "config.pbtxt").read_text())
    return {k: v.string_value for k, v in config.parameters.items()}


def test_export_records_the_reference_in_metadata_and_config(mlflow_registry: str, tmp_path: Path) -> None:
    import mlflow
    import onnxruntime as ort

    from builder.export import ExportRequest, export_model

    helpers.column_transformer_multiclass_strings("drift-multi")
    repo = tmp_path / "repo"
    result = export_model(ExportRequest("models:/drift-multi@champion", repo))
    assert result.warnings == []
    version = repo / "drift-multi" / "1"
    metadata = json.loads((version / "metadata.json").read_text())
    reference = metadata["drift"]["reference"]
    assert json.loads(config_parameters(repo / "drift-multi")["drift.reference"]) == reference

    # What the run logged, read back here, binned independently.
    run_id = metadata["source"]["run_id"]
    assert reference["source"] == f"runs:/{run_id}/serving/reference.parquet"
    frame = pd.read_parquet(
        mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path="serving/reference.parquet", dst_path=str(tmp_path)
        )
    )
    assert reference["rows"] == len(frame)
    served = {c["name"]: c["dtype"] for c in metadata["serving"]["columns"]}
    for feature in reference["features"]:
        name, dtype = feature["name"], served[feature["name"]]
        if dtype == "string":
            assert feature == expect_categorical(name, frame[name], strings=True)
        else:
            assert feature == expect_numeric(name, frame[name], served_float32=dtype == "float32")

    # The prediction: the served graph (model.onnx, what Triton runs) on those rows.
    session = ort.InferenceSession(str(version / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {}
    for name, dtype in served.items():
        column = frame[name].to_numpy()
        feeds[name] = (column.astype(object) if dtype == "string" else column.astype(dtype)).reshape(-1, 1)
    (labels,) = session.run(["label"], feeds)
    classes = metadata["serving"]["classes"]
    counted = pd.Series(labels.ravel()).value_counts()
    assert reference["prediction"] == {
        "name": "label",
        "kind": "categorical",
        "categories": classes,
        "counts": [int(counted.get(c, 0)) for c in classes] + [0],
        "nulls": 0,
    }


def run_cli(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """`builder ...` in this process (its real entry point: error lines, exit codes)."""
    from builder.cli.main import main

    monkeypatch.setattr(sys, "argv", ["builder", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0), capsys.readouterr().err


@pytest.fixture(scope="module")
def no_reference_model(mlflow_registry: str) -> str:
    models.sklearn_classifier(
        "drift-noref", pip_requirements=["scikit-learn"]
    )  # its run logs no serving/reference.parquet
    return "models:/drift-noref@champion"


def test_a_run_without_reference_warns_and_drift_is_off(
    no_reference_model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = tmp_path / "repo"
    code, err = run_cli(["export", no_reference_model, "--repo", str(repo)], monkeypatch, capsys)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "drift is off for this version" in warnings[0]
    assert "serving/reference.parquet" in warnings[0]
    metadata = json.loads((repo / "drift-noref" / "1" / "metadata.json").read_text())
    assert (
        metadata["drift"]["reference"] is None and "serving/reference.parquet" in metadata["drift"]["reason"]
    )
    assert "drift.reference" not in config_parameters(repo / "drift-noref")
    assert "serving.kind" in config_parameters(repo / "drift-noref")  # the rest of the export is whole


@pytest.mark.parametrize("bad", ["text", "columns"])
def test_a_bad_reference_file_is_refused_with_one_line(
    bad: str,
    no_reference_model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "reference.parquet"
    if bad == "text":
        path.write_text("amount,hour\n1,2\n")
    else:
        models.dataset(20)[0].drop(columns=["hour"]).to_parquet(path)
    repo = tmp_path / "repo"
    code, err = run_cli(
        ["export", no_reference_model, "--repo", str(repo), "--reference", str(path)], monkeypatch, capsys
    )
    assert code == UsageError.exit_code
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(path) in errors[0], err
    assert ("not a readable Parquet file" if bad == "text" else "lacks the model column(s) hour") in errors[0]
    assert "Traceback" not in err
    assert not repo.exists()


def test_an_ensemble_carries_the_reference_only_where_its_preprocess_changes_nothing(
    no_reference_model: str, tmp_path: Path
) -> None:
    from builder.export import ExportRequest, export_model
    from builder.export.describe import ensemble_drift

    rows = tmp_path / "rows.parquet"
    models.dataset(300, seed=5)[0].to_parquet(rows)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"postprocess": {"positive_index": 1}}))  # no preprocess: values pass as sent
    repo = tmp_path / "repo"
    export_model(ExportRequest(no_reference_model, repo, ensemble=True, ensemble_spec=spec, reference=rows))
    model = json.loads((repo / "drift-noref" / "1" / "metadata.json").read_text())["drift"]
    ensemble = json.loads((repo / "drift-noref_ensemble" / "1" / "metadata.json").read_text())["drift"]
    assert model["reference"]["source"] == str(rows) and model["reference"]["rows"] == 300
    assert ensemble == model
    assert (
        config_parameters(repo / "drift-noref_ensemble")["drift.reference"]
        == config_parameters(repo / "drift-noref")["drift.reference"]
    )
    # A preprocess that scales: the ensemble's callers send other values than the model sees.
    scaled = ensemble_drift(Drift(model["reference"]), {"mean": [0.0] * 5, "scale": [2.0] * 5})
    assert scaled.reference is None and "preprocess" in str(scaled.reason)
