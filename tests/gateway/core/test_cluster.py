"""Clusterers (issue 29), gateway side: ``serving.kind`` ``cluster`` with a ``label`` (the cluster
id) and ``distances`` (to each cluster centre). Contracts built by hand, as Triton's model-config
API gives them (the builder's export of a KMeans is tests/builder/convert/test_models_round3_onnx_cluster.py),
over the same stand-ins for Triton and Feast as the other kinds' (tests/gateway/core/test_kinds.py):
the catalog, the answer over HTTP and gRPC, drift of the cluster label as a categorical, the
payload log's and OIP's columns, and a wrong-shaped answer as a clear OutputMismatch."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from gateway.catalog import incompatible
from gateway.errors import OutputMismatch, SpecError
from gateway.grpc import v1 as grpc_v1
from gateway.http import bodies
from gateway.oip import mapping
from gateway.payload_log.layout import _predictions
from gateway.responses import predictions
from gateway.stats.reference import parse_reference
from tests.gateway.core.helpers import amounts, config, reference, result, serve_both, service_of, spec_of

CLUSTER = {
    "serving.kind": "cluster",
    "serving.outputs": {"label": "label", "distances": "distances"},
    "serving.clusters": "3",
}
LABEL_REF = {
    "name": "label",
    "kind": "categorical",
    "categories": [0, 1, 2],
    "counts": [10, 10, 10, 0],
    "nulls": 0,
}


def cluster_config(width: str = "3", **change: Any) -> dict:
    return config({**CLUSTER, **change}, {"label": ["1"], "distances": [width]})


def cluster_answer(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Centres at amount 0, 50 and 200: a row's cluster is the nearest."""
    a = amounts(inputs)
    distances = np.abs(a - np.array([[0.0, 50.0, 200.0]], dtype=np.float32))
    return {"label": distances.argmin(axis=1).reshape(-1, 1).astype(np.int64), "distances": distances}


def test_a_clusterer_is_read_with_its_clusters_and_asks_for_label_and_distances():
    spec = spec_of(cluster_config())
    assert spec.kind == "cluster" and spec.classes is None and spec.clusters == 3
    assert spec.roles.label == "label" and spec.roles.distances == "distances"
    assert spec.outputs == ("label", "distances")
    label_only = spec_of(config({**CLUSTER, "serving.outputs": {"label": "label"}}, {"label": ["1"]}))
    assert label_only.outputs == ("label",)


@pytest.mark.parametrize(
    "cfg, fragment",
    [
        (cluster_config(**{"serving.outputs": {"distances": "distances"}}), "needs a label output"),
        (cluster_config("4"), "has 4 column(s) per row, but serving.clusters is 3"),
        (cluster_config(**{"serving.clusters": "0"}), "not a whole number >= 1"),
        (
            cluster_config(
                **{
                    "serving.kind": "regression",
                    "serving.outputs": {"value": "distances"},
                    "serving.targets": "3",
                }
            ),
            "applies to cluster",
        ),
    ],
)
def test_a_cluster_contract_the_gateway_cannot_serve_is_a_spec_error_saying_what(cfg: dict, fragment: str):
    with pytest.raises(SpecError) as err:
        spec_of(cfg)
    assert fragment in err.value.message


def test_a_cluster_answer_is_its_id_and_distances_over_http_and_grpc_messages():
    spec = spec_of(cluster_config())
    out = {
        "label": np.array([[2], [0]]),
        "distances": np.array([[3.0, 2.0, 0.5], [0.25, 1.0, 4.0]], np.float32),
    }
    res = result(spec, out)
    body = json.loads(bodies.to_json(res.to_dict()))
    assert body["kind"] == "cluster" and "classes" not in body
    assert body["predictions"] == [
        {"label": 2, "distances": [3.0, 2.0, 0.5], "defaults_used": False},
        {"label": 0, "distances": [0.25, 1.0, 4.0], "defaults_used": False},
    ]
    reply = grpc_v1.to_response(res)
    assert reply.kind == "cluster"
    assert [(p.label, p.class_label.int_value) for p in reply.predictions] == [(2, 2), (0, 0)]
    assert [list(p.distances) for p in reply.predictions] == [[3.0, 2.0, 0.5], [0.25, 1.0, 4.0]]


@pytest.mark.parametrize(
    "out, fragment",
    [
        ({"label": np.array([[3], [0]]), "distances": np.zeros((2, 3))}, "cluster ids within 0..2"),
        ({"label": np.array([[0.5], [0.0]]), "distances": np.zeros((2, 3))}, "integer cluster ids"),
        ({"label": np.array([[1], [0]]), "distances": np.zeros((2, 2))}, "has 2 column(s); 3 expected"),
    ],
)
def test_a_cluster_answer_that_breaks_the_contract_is_an_output_mismatch(out: dict, fragment: str):
    with pytest.raises(OutputMismatch) as err:
        result(spec_of(cluster_config()), out)
    assert fragment in err.value.message


def test_a_clusterer_over_the_http_app_and_grpc_server_and_its_label_drift():
    cfg = cluster_config(**{"drift.reference": reference(LABEL_REF)})
    status, body, reply, drift_status, drift = serve_both(service_of(cfg, cluster_answer))
    assert status == 200 and body["kind"] == "cluster"
    assert [p["label"] for p in body["predictions"]] == [0, 2]  # amounts 5 and 150
    assert body["predictions"][1]["distances"] == pytest.approx([150.0, 100.0, 50.0])
    assert [p.label for p in reply.predictions] == [0, 2]
    assert list(reply.predictions[0].distances) == pytest.approx([5.0, 45.0, 195.0])
    assert drift_status == 200
    version = drift["versions"][0]
    assert version["drift"] == "on" and version["rows"] == 4  # HTTP's 2 rows and gRPC's 2
    assert version["prediction"]["name"] == "label" and version["prediction"]["kind"] == "categorical"


def test_the_cluster_label_drift_reference_is_categorical_over_the_cluster_ids():
    parsed = parse_reference(reference(LABEL_REF), spec_of(cluster_config()))
    assert parsed.prediction is not None and parsed.prediction.categories == (0, 1, 2)
    numeric = {"name": "label", "kind": "numeric", "edges": [1.0], "counts": [1, 1], "nulls": 0}
    with pytest.raises(ValueError, match="kind 'numeric', expected 'categorical'"):
        parse_reference(reference(numeric), spec_of(cluster_config()))


def test_the_payload_log_and_oip_carry_the_cluster_id_and_distances():
    spec = spec_of(cluster_config())
    rows = predictions(spec, {"label": np.array([[1]]), "distances": np.array([[1.0, 0.5, 2.0]])}, [False])
    columns = _predictions(spec, rows)
    assert columns["__label"].to_pylist() == [1] and columns["__distances"].to_pylist() == [[1.0, 0.5, 2.0]]
    tensors = {t.name: t for t in mapping.outputs(spec)}
    assert (tensors["label"].datatype, tensors["distances"].shape) == ("INT64", (-1, 3))
    res = result(spec, {"label": np.array([[1]]), "distances": np.array([[1.0, 0.5, 2.0]])})
    answered = {o.name: o for o in mapping.answer(res, mapping.outputs(spec))}
    assert answered["label"].values == [1] and answered["distances"].values == [1.0, 0.5, 2.0]


def test_a_challenger_with_another_number_of_clusters_is_not_comparable():
    champion = spec_of(cluster_config())
    challenger = spec_of(cluster_config("4", **{"serving.clusters": "4"}))
    assert incompatible(champion, challenger) == "challenger 'm' has 4 clusters; 'm' has 3"
    assert incompatible(champion, spec_of(cluster_config())) is None
