"""The generated ensemble steps and the fused graph, run with onnxruntime, against the numpy
reference (``builder/ensemble_models/transforms.py``) that training uses; and the schedulers
their configs ask Triton for."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from builder.convert.base import normalize_outputs
from builder.ensemble.fused import fused_artifact
from builder.ensemble.graphs import fused_graph, postprocess_graph, preprocess_graph
from builder.ensemble.plan import WrappedModel
from builder.ensemble.spec import EnsembleSpec
from builder.ensemble.steps_mode import ensemble_artifacts
from builder.ensemble_models import transforms
from builder.errors import UsageError
from builder.repository.triton_config import ServingOptions
from builder.tensors import graph_tensors

WIDTH = 4


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def raw_rows(seed: int = 0, n: int = 200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, WIDTH)) * [1, 10, 1e3, 1e-3]).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = np.nan  # NaN in every column
    x[3] = np.nan  # an all-NaN row
    x[4] = [0.0, -0.0, np.finfo(np.float32).max / 4, np.finfo(np.float32).tiny]
    return x


SPECS = {
    "full": {
        "impute": [0.5, -2.0, 1e3, 3e-4],
        "mean": [0.1, 1.0, -5.0, 1e-3],
        "scale": [0.3, 7.0, 1e3, 1e-4],
    },
    "impute only": {"impute": [1.0, 2.0, 3.0, 4.0]},
    "scale only": {"mean": [1.0, 2.0, 3.0, 4.0], "scale": [2.0, 2.0, 2.0, 2.0]},
    "nothing": {},
}


@pytest.mark.parametrize("key", SPECS)
def test_preprocess_graph_is_the_reference_bit_for_bit(key: str) -> None:
    spec = SPECS[key]
    x = raw_rows()
    got = run(preprocess_graph(spec, WIDTH, "input"), {"input": x})["features"]
    want = transforms.preprocess(x, spec)
    assert got.dtype == np.float32 and got.shape == (len(x), WIDTH)
    np.testing.assert_array_equal(got, want)  # NaN where the reference keeps NaN, too


def test_all_nan_rows_become_the_imputation_values() -> None:
    spec = SPECS["full"]
    x = np.full((3, WIDTH), np.nan, dtype=np.float32)
    got = run(preprocess_graph(spec, WIDTH, "input"), {"input": x})["features"]
    want = (np.array(spec["impute"]) - spec["mean"]) / np.array(spec["scale"])
    np.testing.assert_array_equal(got, np.tile(want.astype(np.float32), (3, 1)))


def fitted_spec(x: np.ndarray) -> dict[str, Any]:
    return transforms.fit_preprocess(x)


@pytest.mark.parametrize("positive_index", [0, 1])
@pytest.mark.parametrize("threshold", [0.5, 0.3, 0.0, 1.0])
def test_postprocess_graph_is_the_reference(positive_index: int, threshold: float) -> None:
    spec = {"positive_index": positive_index, "threshold": threshold}
    rng = np.random.default_rng(1)
    p = rng.random(64).astype(np.float32)
    # Ties: scores exactly at the threshold (its float32 value), and at 0 and 1.
    p[:4] = [np.float32(threshold), 0.0, 1.0, np.nextafter(np.float32(threshold), np.float32(0))]
    probs = np.stack([p, 1 - p] if positive_index == 0 else [1 - p, p], axis=1).astype(np.float32)
    got = run(postprocess_graph(spec, 2), {"probabilities": probs})
    score, label = transforms.postprocess(probs, spec)
    assert got["score"].dtype == np.float32 and got["score"].shape == (64, 1)
    assert got["label"].dtype == np.int64 and got["label"].shape == (64, 1)
    np.testing.assert_array_equal(got["score"], score)
    np.testing.assert_array_equal(got["label"], label)
    assert got["label"][0, 0] == 1  # a score equal to the threshold is a positive


def test_a_positive_index_outside_the_classes_is_refused() -> None:
    with pytest.raises(UsageError, match="positive_index"):
        postprocess_graph({"positive_index": 2}, 2)


def tree_classifier(x: np.ndarray) -> tuple[Any, onnx.ModelProto]:
    """A small gradient-boosted classifier converted as the builder converts one (opset 15 +
    ai.onnx.ml, label N x 1)."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.ensemble import GradientBoostingClassifier

    features = transforms.preprocess(x, fitted_spec(x))
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1]) / 10 > 0).astype(int)
    native = GradientBoostingClassifier(n_estimators=10, max_depth=3).fit(features, y)
    graph = to_onnx(
        native,
        initial_types=[("input", FloatTensorType([None, WIDTH]))],
        options={"zipmap": False},
        target_opset={"": 15, "ai.onnx.ml": 3},
    )
    return native, normalize_outputs(graph, {"input": features[:2]})


@pytest.mark.parametrize("positive_index", [0, 1])
def test_fused_graph_is_bare_model_plus_reference_math(positive_index: int) -> None:
    x = raw_rows(seed=2)
    pre = fitted_spec(x)
    post = {"positive_index": positive_index, "threshold": 0.3}
    _, model = tree_classifier(x)
    fused = fused_graph(model, pre, post, WIDTH, 2)
    got = run(fused, {"input": x})
    assert set(got) == {"probabilities", "score", "label"}
    bare = run(model, {"input": transforms.preprocess(x, pre)})
    score, label = transforms.postprocess(bare["probabilities"], post)
    np.testing.assert_array_equal(got["probabilities"], bare["probabilities"])
    np.testing.assert_array_equal(got["score"], score)
    np.testing.assert_array_equal(got["label"], label)
    # The model's opsets, not a second default-domain one: ORT and Triton load it as one graph.
    assert {(o.domain, o.version) for o in fused.opset_import} == {
        (o.domain, o.version) for o in model.opset_import
    }


def test_fused_artifact_keeps_the_ensemble_contract_and_the_model_scheduling() -> None:
    x = raw_rows(seed=3)
    _, model = tree_classifier(x)
    spec = EnsembleSpec.from_dict({"preprocess": fitted_spec(x), "postprocess": {"threshold": 0.4}}, "test")
    options = ServingOptions(max_queue_delay_us=500, instances=2)
    art = fused_artifact(
        WrappedModel.of("m", model, options), model, spec, parameters={"serving.layout": "matrix"}
    )
    config = art.config
    assert art.name == "m_ensemble" and config.backend == "onnxruntime"
    assert [i.name for i in config.input] == ["input"]
    assert [o.name for o in config.output] == ["probabilities", "score", "label"]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert config.instance_group[0].count == 2
    assert config.parameters["serving.layout"].string_value == "matrix"
    got = run(onnx.load_from_string(art.version_files["model.onnx"]), {"input": x})
    np.testing.assert_array_equal(
        got["label"][:, 0], (got["score"][:, 0] >= np.float32(0.4)).astype(np.int64)
    )


def test_steps_configs_only_the_model_waits_for_a_batch() -> None:
    x = raw_rows(seed=4)
    _, model = tree_classifier(x)
    inputs, outputs = graph_tensors(model.graph.input), graph_tensors(model.graph.output)
    spec = EnsembleSpec.from_dict({"preprocess": fitted_spec(x), "postprocess": {}}, "test")
    options = ServingOptions(max_queue_delay_us=1000, instances=3, max_queue_size=10)
    arts = {
        a.name: a
        for a in ensemble_artifacts(
            WrappedModel("m", inputs, outputs, options, version=7), spec, parameters={"k": "v"}
        )
    }
    assert set(arts) == {"m_preprocess", "m_postprocess", "m_ensemble"}
    for step in ("m_preprocess", "m_postprocess"):
        config = arts[step].config
        assert config.backend == "onnxruntime" and "model.onnx" in arts[step].version_files
        assert config.HasField("dynamic_batching")  # what queued while busy still goes as one batch
        assert config.dynamic_batching.max_queue_delay_microseconds == 0
        assert config.instance_group[0].count == 1
    ensemble = arts["m_ensemble"].config
    assert ensemble.WhichOneof("scheduling_choice") == "ensemble_scheduling"  # no queue of its own
    assert [s.model_version for s in ensemble.ensemble_scheduling.step] == [7, 7, 7]
    assert ensemble.parameters["k"].string_value == "v"
    # The steps written for Triton are the graphs tested above: the reference end to end.
    pre = onnx.load_from_string(arts["m_preprocess"].version_files["model.onnx"])
    np.testing.assert_array_equal(
        run(pre, {"input": x})["features"], transforms.preprocess(x, spec.preprocess)
    )
