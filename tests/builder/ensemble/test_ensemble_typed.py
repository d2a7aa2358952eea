"""Ensembles of a model with typed column inputs (its preprocessing inside its graph): the
generated post-only steps, run with onnxruntime, against numpy written here (threshold ->
class, argmax -> class, ties included); the fused graph against the bare model plus that math;
the configs of the steps ensemble; a spec asking such a model for preprocessing, refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest

from builder.convert.base import normalize_outputs
from builder.ensemble.fused import fused_artifact
from builder.ensemble.graphs import label_graph, typed_fused_graph
from builder.ensemble.plan import WrappedModel
from builder.ensemble.spec import EnsembleSpec, takes_typed_inputs
from builder.ensemble.steps_mode import ensemble_artifacts
from builder.errors import UsageError
from builder.kinds import ModelKind
from builder.repository.triton_config import ServingOptions
from builder.tensors import TensorSpec, graph_tensors


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def binary_probs(threshold: float, positive_index: int, n: int = 64) -> np.ndarray:
    p = np.random.default_rng(1).random(n).astype(np.float32)
    # Ties: exactly the threshold's float32 value, the float32 just below it, 0 and 1.
    p[:4] = [np.float32(threshold), np.nextafter(np.float32(threshold), np.float32(0)), 0.0, 1.0]
    columns = [p, 1 - p] if positive_index == 0 else [1 - p, p]
    return np.stack(columns, axis=1).astype(np.float32)


@pytest.mark.parametrize("classes", [(0, 1), ("legit", "fraud")])
@pytest.mark.parametrize("positive_index", [0, 1])
@pytest.mark.parametrize("threshold", [0.5, 0.35, 0.0, 1.0])
def test_binary_label_is_the_thresholded_class(
    classes: tuple[Any, ...], positive_index: int, threshold: float
) -> None:
    dtype = "string" if isinstance(classes[0], str) else "int64"
    graph = label_graph({"threshold": threshold, "positive_index": positive_index}, classes, dtype)
    probs = binary_probs(threshold, positive_index)
    got = run(graph, {"probabilities": probs})
    score = probs[:, positive_index]
    other = classes[1 - positive_index]
    want = np.array([classes[positive_index] if s >= np.float32(threshold) else other for s in score])
    assert set(got) == {"score", "label"}
    assert got["score"].dtype == np.float32 and got["score"].shape == (64, 1)
    np.testing.assert_array_equal(got["score"][:, 0], score)
    assert got["label"].shape == (64, 1)
    assert got["label"].dtype == (np.int64 if dtype == "int64" else object)
    assert got["label"][:, 0].tolist() == want.tolist()
    assert got["label"][0, 0] == classes[positive_index]  # a score equal to the threshold: positive


def test_multiclass_label_is_the_argmax_class_by_name() -> None:
    classes = ("high", "low", "medium")
    rng = np.random.default_rng(2)
    probs = rng.dirichlet(np.ones(3), 100).astype(np.float32)
    probs[0] = [1 / 3, 1 / 3, 1 / 3]  # ties: the first of equal maxima, as numpy's argmax
    probs[1] = [0.2, 0.4, 0.4]
    probs[2] = [0.5, 0.0, 0.5]
    got = run(label_graph({"threshold": 0.9}, classes, "string"), {"probabilities": probs})
    assert set(got) == {"label"}
    want = [classes[i] for i in probs.argmax(axis=1)]
    assert got["label"][:, 0].tolist() == want
    assert want[:3] == ["high", "low", "high"]


def test_labels_the_lookup_cannot_write_are_refused() -> None:
    with pytest.raises(UsageError, match="label is float32"):
        label_graph({}, (0.5, 1.5), "float32")
    with pytest.raises(UsageError, match="positive_index"):
        label_graph({"positive_index": 2}, (0, 1), "int64")


def typed_frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, rows).astype(np.float32),
            "country": rng.choice(["us", "de", "fr", "br"], rows).astype(object),
        }
    )
    frame.loc[[0, 1], "amount"] = np.nan
    return frame


def typed_classifier(labels: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], tuple[Any, ...]]:
    """A Pipeline over a float and a string column (impute + scale, one-hot), converted as the
    builder converts one (one input per column, label N x 1), with fresh rows as Triton inputs."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    X = typed_frame(300, 0)
    risk = np.nan_to_num(X.amount.to_numpy(), nan=20.0) / 40 + (X.country == "br")
    y = (risk > 1.0).astype(int) if labels == "binary" else np.digitize(risk, [0.6, 1.2])
    if labels == "strings":
        y = np.array(["low", "medium", "high"])[y]
    columns = ColumnTransformer(
        [
            ("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), ["amount"]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["country"]),
        ]
    )
    native = make_pipeline(columns, LogisticRegression()).fit(X, y)
    graph = to_onnx(
        native,
        initial_types=[("amount", FloatTensorType([None, 1])), ("country", StringTensorType([None, 1]))],
        options={id(native.steps[-1][1]): {"zipmap": False}},
        target_opset={"": 15, "ai.onnx.ml": 3},
    )
    fresh = typed_frame(40, 1)
    fresh.loc[2, "country"] = "never-seen"
    feeds = {
        "amount": fresh.amount.to_numpy(np.float32).reshape(-1, 1),
        "country": fresh.country.to_numpy(object).reshape(-1, 1),
    }
    graph = normalize_outputs(graph, {k: v[:2] for k, v in feeds.items()})
    classes = tuple(v.item() if isinstance(v, np.generic) else v for v in native.classes_)
    return graph, feeds, classes


@pytest.mark.parametrize("labels", ["binary", "strings"])
def test_fused_typed_graph_is_the_bare_model_plus_the_label_math(labels: str) -> None:
    model, feeds, classes = typed_classifier(labels)
    bare = run(model, feeds)
    dtype = "string" if labels == "strings" else "int64"
    fused = typed_fused_graph(model, {"threshold": 0.3}, classes, dtype)
    # The model's own inputs, one per column: its preprocessing is inside the graph.
    assert [i.name for i in fused.graph.input] == ["amount", "country"]
    got = run(fused, feeds)
    np.testing.assert_array_equal(got["probabilities"], bare["probabilities"])
    probs = bare["probabilities"]
    if labels == "binary":
        assert set(got) == {"probabilities", "score", "label"}
        np.testing.assert_array_equal(got["score"][:, 0], probs[:, 1])
        want = np.where(probs[:, 1] >= np.float32(0.3), classes[1], classes[0])
        assert (want != bare["label"][:, 0]).any(), "the threshold changes no label: a weak test"
    else:
        assert set(got) == {"probabilities", "label"}
        want = np.array(classes, dtype=object)[probs.argmax(axis=1)]
        assert got["label"][:, 0].tolist() == bare["label"][:, 0].tolist()  # the model's own argmax
    assert got["label"][:, 0].tolist() == want.tolist()


def test_typed_steps_ensemble_is_model_then_postprocess_with_the_models_inputs() -> None:
    model, _, classes = typed_classifier("strings")
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    assert takes_typed_inputs("columns", inputs)
    spec = EnsembleSpec({}, {"threshold": 0.4}, "test")
    kind = ModelKind.classifier(classes)
    arts = {
        a.name: a
        for a in ensemble_artifacts(
            WrappedModel("m", inputs, outputs, ServingOptions(), kind, "columns", 3),
            spec,
            parameters={"k": "v"},
        )
    }
    assert set(arts) == {"m_postprocess", "m_ensemble"}  # no preprocess step
    post = arts["m_postprocess"].config
    assert post.backend == "onnxruntime"
    assert [(o.name, o.data_type) for o in post.output] == [("label", 13)]  # TYPE_STRING
    ensemble = arts["m_ensemble"].config
    assert [i.name for i in ensemble.input] == ["amount", "country"]
    assert [o.name for o in ensemble.output] == ["probabilities", "label"]
    assert [(s.model_name, s.model_version) for s in ensemble.ensemble_scheduling.step] == [
        ("m", 3),
        ("m_postprocess", 3),
    ]
    # A regressor gets no generated step: the ensemble is the model, under the ensemble's name.
    value = (TensorSpec("prediction", "float32", (-1, 1)),)
    arts = ensemble_artifacts(
        WrappedModel("r", inputs, value, ServingOptions(), ModelKind.regressor(), "columns", 1), spec
    )
    assert [a.name for a in arts] == ["r_ensemble"]
    assert [o.name for o in arts[0].config.output] == ["prediction"]


def test_fused_typed_artifact_keeps_the_inputs_warmup_and_contract() -> None:
    model, feeds, classes = typed_classifier("binary")
    spec = EnsembleSpec({}, {"threshold": 0.3}, "test")
    warm = {"warmup/amount": b"\0" * 4, "warmup/country": b"\x02\0\0\0us"}
    art = fused_artifact(
        WrappedModel.of("m", model, ServingOptions(), ModelKind.classifier(classes), "columns"),
        model,
        spec,
        parameters={"serving.layout": "columns"},
        warmup_files=warm,
        identity="id",
    )
    config = art.config
    assert [i.name for i in config.input] == ["amount", "country"]
    assert [o.name for o in config.output] == ["probabilities", "score", "label"]
    assert config.parameters["serving.layout"].string_value == "columns"
    assert art.model_files == warm and len(config.model_warmup) == 1
    got = run(onnx.load_from_string(art.version_files["model.onnx"]), feeds)
    np.testing.assert_array_equal(
        got["label"][:, 0], (got["score"][:, 0] >= np.float32(0.3)).astype(np.int64)
    )


@pytest.mark.parametrize("mode", ["steps", "fused"])
def test_a_spec_asking_a_typed_model_for_preprocessing_is_refused(mode: str) -> None:
    model, _, classes = typed_classifier("binary")
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    spec = EnsembleSpec({"impute": [0.0], "scale": [2.0]}, {}, "runs:/abc/serving/ensemble.json")
    kind = ModelKind.classifier(classes)
    with pytest.raises(UsageError) as err:
        if mode == "steps":
            ensemble_artifacts(WrappedModel("m", inputs, outputs, ServingOptions(), kind, "columns"), spec)
        else:
            fused_artifact(WrappedModel.of("m", model, ServingOptions(), kind, "columns"), model, spec)
    assert "preprocess.impute/scale on a model with typed column inputs" in err.value.message
    assert err.value.hint is not None and "drop 'preprocess'" in err.value.hint
