"""The third held-out round's ONNX models and clusterers (issue 29, items 1 and 2), as a user
registers them in the tests' SQLite registry and exports them with ``builder export``.

- (1) scikit-learn models converted by the user with skl2onnx (from float32 rows, as its
  documentation does) and logged with ``mlflow.onnx.log_model(..., input_example=...,
  signature=...)``: a signature of one unnamed tensor is served as ``input`` and mapped onto
  the graph's only input (``X``); skl2onnx's default ZipMap output (a list of maps) is unwrapped
  into the classifier contract (``label``, ``probabilities``, the classes in the ZipMap's
  order); without ZipMap the same contract; a regressor passes its outputs through. A float64
  signature over a float32 graph is served as signed (the graph casts). A ZipMap over float64
  probabilities (which onnxruntime refuses to load) and a signature naming another input are
  refused with the fix in the hint.
- (2) clusterers (KMeans on raw features, MiniBatchKMeans on a numpy array, a StandardScaler +
  KMeans Pipeline): ``serving.kind`` ``cluster``, ``label`` the cluster id and ``distances`` to
  each centre; their drift reference bins the label as a categorical over the cluster ids.

One Triton serves them all; each answer over HTTP is compared with the model as logged (the ONNX
graph in onnxruntime, the scikit-learn clusterer) on fresh rows. The raw KMeans is also served
through the gateway (its core and HTTP app, in process, calling that Triton; stand-in online
store): a /v1 predict answers the cluster id and distances, and drift counts the label.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.errors import ConversionError
from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import models, servers
from tests.builder.convert.helpers import served_facts

pytestmark = pytest.mark.integration

ZIPMAP, ZIPMAP_STRINGS, NO_ZIPMAP, ONNX_REGRESSOR = (
    "r3-onnx-zipmap",
    "r3-onnx-zipmap-strings",
    "r3-onnx-no-zipmap",
    "r3-onnx-regressor",
)
KMEANS, MINIBATCH, SCALED = "r3-kmeans", "r3-minibatch-kmeans", "r3-scaled-kmeans"
ONNX_MODELS = (ZIPMAP, ZIPMAP_STRINGS, NO_ZIPMAP, ONNX_REGRESSOR)
CLUSTERERS = (KMEANS, MINIBATCH, SCALED)
FEAST = {"feast.feature_service": "txn", "feast.entity_keys": "customer_id"}
TIERS = np.array(["bronze", "silver", "gold"])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=300
    )


def log_onnx(name: str, graph: Any, example: np.ndarray, predicted: np.ndarray) -> None:
    """What the held-out user did: mlflow.onnx.log_model with an input example and a signature
    (mlflow.onnx infers none from an example), registered as ``name@champion``."""
    import mlflow
    from mlflow.models import infer_signature

    with mlflow.start_run(run_name=name):
        info = mlflow.onnx.log_model(
            graph,
            name="model",
            input_example=example,
            signature=infer_signature(example, predicted),
            registered_model_name=name,
            pip_requirements=["onnxruntime"],
        )
    mlflow.MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


def log_array_model(name: str, model: Any, x: np.ndarray) -> None:
    """A scikit-learn model trained on a numpy array, logged with its first rows as the input
    example (a tensor signature), registered as ``name@champion``."""
    import mlflow
    import skops.io

    trusted = skops.io.get_untrusted_types(data=skops.io.dumps(model))
    with mlflow.start_run(run_name=name):
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            input_example=x[:5],
            registered_model_name=name,
            skops_trusted_types=trusted,
            pip_requirements=["scikit-learn"],
        )
    mlflow.MlflowClient().set_registered_model_alias(name, "champion", str(info.registered_model_version))


def tiers(X: np.ndarray) -> np.ndarray:
    return TIERS[np.digitize(X[:, 2], [0.33, 0.66])]


@pytest.fixture(scope="module")
def exported(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every model fitted, logged, registered and exported into one repository: name -> what
    answers natively (the ONNX graph as logged, or the scikit-learn clusterer)."""
    from skl2onnx import to_onnx
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = models.dataset(300)
    x64 = X.to_numpy()
    x32 = x64.astype(np.float32)
    natives: dict[str, Any] = {}

    binary = make_pipeline(StandardScaler(), LogisticRegression()).fit(x64, y)
    natives[ZIPMAP] = to_onnx(binary, x32[:1])  # skl2onnx's default: ZipMap probabilities
    # the user's float64 rows as example and signature, over a graph built for float32
    log_onnx(ZIPMAP, natives[ZIPMAP], x64[:5], binary.predict(x64[:5]))
    multi = make_pipeline(StandardScaler(), LogisticRegression()).fit(x64, tiers(x64))
    natives[ZIPMAP_STRINGS] = to_onnx(multi, x32[:1])
    log_onnx(ZIPMAP_STRINGS, natives[ZIPMAP_STRINGS], x32[:5], multi.predict(x32[:5]))
    final = binary.steps[-1][1]
    natives[NO_ZIPMAP] = to_onnx(binary, x32[:1], options={id(final): {"zipmap": False}})
    log_onnx(NO_ZIPMAP, natives[NO_ZIPMAP], x32[:5], binary.predict(x32[:5]))
    ridge = Ridge().fit(x64, 0.1 * x64[:, 0] + y)
    natives[ONNX_REGRESSOR] = to_onnx(ridge, x32[:1])
    log_onnx(ONNX_REGRESSOR, natives[ONNX_REGRESSOR], x32[:5], ridge.predict(x32[:5]))

    # Raw features (amounts, ages in days): distances need the double precision the graph uses.
    natives[KMEANS] = KMeans(4, random_state=0, n_init="auto").fit(X)
    tags = {**FEAST, "feast.request_fields": ",".join(X.columns)}
    models.register_fitted(KMEANS, natives[KMEANS], X, tags=tags, reference=True)
    natives[MINIBATCH] = MiniBatchKMeans(3, random_state=0, n_init="auto").fit(x64)
    log_array_model(MINIBATCH, natives[MINIBATCH], x64)
    natives[SCALED] = make_pipeline(StandardScaler(), KMeans(5, random_state=0, n_init="auto")).fit(X)
    models.register_fitted(SCALED, natives[SCALED], X)

    repo = tmp_path_factory.mktemp("round3-onnx-cluster") / "model_repo"
    steps = {}
    for name in natives:
        if name == ZIPMAP:  # as the held-out user did: the CLI
            done = cli("export", f"models:/{name}@champion", "--repo", str(repo), "--json")
            assert done.returncode == 0, done.stderr
            steps[name] = {s["step"]: s["detail"] for s in json.loads(done.stdout)["steps"]}
        else:
            result = export_model(ExportRequest(f"models:/{name}@champion", repo))
            assert result.parity.passed
            steps[name] = {s.name: s.detail for s in result.steps}
    return {"repo": repo, "natives": natives, "steps": steps}


@pytest.fixture(scope="module")
def triton(
    exported: dict[str, Any], triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("round3-onnx-cluster-log") / "tritonserver.log"
    with servers.serving(exported["repo"], triton_runtime, log, timeout=240) as server:
        yield server


def fresh() -> pd.DataFrame:
    X, _ = models.dataset(40, seed=7)
    return X


def infer_http(server: TritonServer, model: str, rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Triton's answer over HTTP, every output, the inputs built from the served contract: one
    ``input`` of the dtype the config declares (tensors, matrix), in the signature's column order."""
    import tritonclient.http as httpclient
    from tritonclient.utils import triton_to_np_dtype

    facts = served_facts(server, model)
    (name, data_type), *rest = facts["inputs"]
    assert not rest and name == "input", facts["inputs"]
    columns = facts.get("feature_names") or list(rows.columns)
    array = rows[columns].to_numpy().astype(triton_to_np_dtype(data_type.removeprefix("TYPE_")))
    tensor = httpclient.InferInput(name, list(array.shape), data_type.removeprefix("TYPE_"))
    tensor.set_data_from_numpy(array)
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config(model)
    result = client.infer(model, [tensor])
    return {o["name"]: result.as_numpy(o["name"]) for o in config["output"]}


def as_logged(graph: Any, rows: pd.DataFrame) -> dict[str, Any]:
    """The ONNX model as the user logged it, in onnxruntime, on float32 rows."""
    import onnxruntime as ort

    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {"X": rows.to_numpy(np.float32)}), strict=True))


def decoded(labels: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v)(labels)


# -- (1) ONNX models as logged ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "classes"),
    [(ZIPMAP, "binary", [0, 1]), (ZIPMAP_STRINGS, "multiclass", ["bronze", "gold", "silver"])],
)
def test_a_zipmap_classifier_is_served_as_label_and_probabilities_like_the_model_as_logged(
    triton: TritonServer, exported: dict[str, Any], name: str, kind: str, classes: list[Any]
) -> None:
    facts = served_facts(triton, name)
    assert (facts["kind"], facts["classes"], facts["layout"]) == (kind, classes, "tensors")
    assert facts["outputs"] == {"label": "label", "probabilities": "probabilities"}
    rows = fresh()
    got = infer_http(triton, name, rows)
    logged = as_logged(exported["natives"][name], rows)
    assert set(got) == {"label", "probabilities"}
    np.testing.assert_array_equal(decoded(got["label"]), logged["output_label"].reshape(-1, 1))
    # the maps the ZipMap gave, as columns in the classes' order the contract records
    maps = np.array([[row[c] for c in classes] for row in logged["output_probability"]], dtype=np.float32)
    np.testing.assert_allclose(got["probabilities"], maps, atol=1e-6, rtol=1e-6)
    assert got["probabilities"].shape == (len(rows), len(classes))


def test_the_unnamed_float64_signature_is_served_as_signed_and_mapped_onto_the_graphs_input(
    triton: TritonServer, exported: dict[str, Any]
) -> None:
    assert served_facts(triton, ZIPMAP)["inputs"] == [("input", "TYPE_FP64")]  # the signature's
    assert served_facts(triton, ZIPMAP_STRINGS)["inputs"] == [("input", "TYPE_FP32")]
    assert [i.name for i in exported["natives"][ZIPMAP].graph.input] == ["X"]  # the graph's own
    meta = json.loads((exported["repo"] / ZIPMAP / "1" / "metadata.json").read_text())
    assert meta["parity"]["passed"] and set(meta["parity"]["outputs"]) == {"label", "probabilities"}
    assert "binary classifier (classes 0, 1)" in exported["steps"][ZIPMAP]["load native model"]


def test_a_classifier_without_zipmap_gets_the_same_contract(
    triton: TritonServer, exported: dict[str, Any]
) -> None:
    assert served_facts(triton, NO_ZIPMAP)["outputs"] == served_facts(triton, ZIPMAP)["outputs"]
    assert served_facts(triton, NO_ZIPMAP)["classes"] == [0, 1]
    rows = fresh()
    got = infer_http(triton, NO_ZIPMAP, rows)
    logged = as_logged(exported["natives"][NO_ZIPMAP], rows)
    np.testing.assert_array_equal(got["label"], logged["label"].reshape(-1, 1))
    np.testing.assert_allclose(got["probabilities"], logged["probabilities"], atol=1e-6, rtol=1e-6)


def test_an_onnx_regressor_passes_its_output_through(triton: TritonServer, exported: dict[str, Any]) -> None:
    facts = served_facts(triton, ONNX_REGRESSOR)
    assert facts["kind"] == "other" and facts["outputs"] == {}
    rows = fresh()
    got = infer_http(triton, ONNX_REGRESSOR, rows)
    logged = as_logged(exported["natives"][ONNX_REGRESSOR], rows)
    np.testing.assert_allclose(got["variable"], logged["variable"], atol=1e-5, rtol=1e-5)


def _refused(name: str, tmp_path: Path) -> tuple[str, str]:
    repo = tmp_path / "repo"
    done = cli("export", f"models:/{name}@champion", "--repo", str(repo))
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    assert [line.split(":")[0] for line in lines] == ["error", "hint"], done.stderr
    assert not repo.exists()
    return lines[0], lines[1]


def test_a_zipmap_over_float64_probabilities_is_refused_with_the_fix(
    mlflow_registry: str, tmp_path: Path
) -> None:
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = models.dataset(100)
    x64 = X.to_numpy()  # converted from float64 rows: skl2onnx's ZipMap then gets float64
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(x64, y)
    log_onnx("r3-onnx-zipmap-double", to_onnx(model, x64[:1]), x64[:5], model.predict(x64[:5]))
    error, hint = _refused("r3-onnx-zipmap-double", tmp_path)
    assert "r3-onnx-zipmap-double" in error and "cannot load the ONNX model as logged" in error
    assert "ZipMap" in error
    assert "astype(numpy.float32)" in hint and "'zipmap': False" in hint
    assert "converter's project" not in hint


def test_a_signature_naming_another_input_is_refused_naming_the_graphs(
    mlflow_registry: str, tmp_path: Path
) -> None:
    import mlflow
    from mlflow.models import infer_signature
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = models.dataset(100)
    x32 = X.to_numpy(np.float32)
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(x32, y)
    example = {"features": x32[:5]}
    with mlflow.start_run():
        mlflow.onnx.log_model(
            to_onnx(model, x32[:1], options={id(model.steps[-1][1]): {"zipmap": False}}),
            name="model",
            signature=infer_signature(example),
            registered_model_name="r3-onnx-named",
            pip_requirements=["onnxruntime"],
        )
    with pytest.raises(ConversionError) as refused:
        export_model(ExportRequest("models:/r3-onnx-named/1", tmp_path / "repo"))
    assert "ONNX inputs ['X'] do not match the signature's ['features']" in refused.value.message
    assert "input_example={'X': ...}" in (refused.value.hint or "")


# -- (2) clusterers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "clusters", "layout"), [(KMEANS, 4, "matrix"), (MINIBATCH, 3, "tensors"), (SCALED, 5, "matrix")]
)
def test_a_clusterer_answers_its_cluster_id_and_distances_like_the_native_model(
    triton: TritonServer, exported: dict[str, Any], name: str, clusters: int, layout: str
) -> None:
    facts = served_facts(triton, name)
    assert (facts["kind"], facts["layout"], facts["clusters"]) == ("cluster", layout, str(clusters))
    assert facts["outputs"] == {"label": "label", "distances": "distances"}
    rows = fresh()
    got = infer_http(triton, name, rows)
    native = exported["natives"][name]
    x = rows.to_numpy(np.float32).astype(np.float64)  # what Triton is sent, as the native model sees it
    x = x if name == MINIBATCH else pd.DataFrame(x, columns=rows.columns)
    assert got["label"].dtype == np.int64 and got["distances"].dtype == np.float32
    np.testing.assert_array_equal(got["label"], native.predict(x).reshape(-1, 1))
    np.testing.assert_allclose(got["distances"], native.transform(x), atol=1e-5, rtol=1e-5)
    assert got["distances"].shape == (len(rows), clusters)


def test_a_clusterers_drift_reference_counts_its_cluster_ids(exported: dict[str, Any]) -> None:
    meta = json.loads((exported["repo"] / KMEANS / "1" / "metadata.json").read_text())
    assert meta["serving"]["kind"] == "cluster" and meta["serving"]["clusters"] == 4
    prediction = meta["drift"]["reference"]["prediction"]
    assert (prediction["name"], prediction["kind"], prediction["categories"]) == (
        "label",
        "categorical",
        [0, 1, 2, 3],
    )
    assert sum(prediction["counts"]) == 300 and prediction["counts"][-1] == 0  # no "other" id
    assert exported["steps"][KMEANS]["load native model"] == "sklearn, clusterer (4 clusters)"


class RequestOnly:
    """The online store of a model whose every column comes with the request: it only says the
    entity key's type."""

    async def key_types(self, service: str) -> dict[str, str]:
        return {"customer_id": "string"}

    async def fetch(self, service: str, entity_rows: list[dict[str, Any]]) -> Any:
        from gateway.clients.features import FeatureRows

        n = len(entity_rows)
        return FeatureRows(values={}, missing=[[] for _ in range(n)], oldest_epoch_s=[None] * n)

    async def close(self) -> None:
        pass


def test_the_gateway_answers_a_clusterers_id_and_distances_and_drifts_on_the_label(
    triton: TritonServer, exported: dict[str, Any]
) -> None:
    from gateway.auth import ApiKeys
    from gateway.clients.triton import connect
    from gateway.core import Predictor
    from gateway.drift.monitor import DriftMonitor
    from gateway.http import app as http_app
    from gateway.service import Service
    from gateway.settings import GatewaySettings
    from tests.gateway.core.helpers import asgi

    rows = fresh().iloc[:6]
    body = {"rows": [{"customer_id": f"C-{i}", **row} for i, row in enumerate(rows.to_dict("records"))]}

    async def main() -> tuple[Any, Any]:
        settings = GatewaySettings(models=(KMEANS,))
        drift = DriftMonitor()
        client = connect(f"http://{triton.http_url}", 10.0)
        predictor = Predictor(settings, client, RequestOnly(), (drift,))  # type: ignore[arg-type]
        service = Service(settings, predictor, ApiKeys.from_settings(settings), (KMEANS,), drift)
        try:
            app = http_app.create_app(service)
            status, answer = await asgi(
                app, "POST", f"/v1/models/{KMEANS}/predict", json.dumps(body).encode()
            )
            assert status == 200, answer
            await asyncio.sleep(0)  # the drift monitor observes after the batch
            drift_status, report = await asgi(app, "GET", f"/v1/models/{KMEANS}/drift?window=1h")
            assert drift_status == 200, report
            return answer, report
        finally:
            await client.close()

    answer, report = asyncio.run(main())
    native = exported["natives"][KMEANS]
    x = pd.DataFrame(rows.to_numpy(np.float32).astype(np.float64), columns=rows.columns)
    assert answer["kind"] == "cluster" and "classes" not in answer
    assert [p["label"] for p in answer["predictions"]] == native.predict(x).tolist()
    np.testing.assert_allclose(
        [p["distances"] for p in answer["predictions"]], native.transform(x), rtol=1e-5
    )
    version = report["versions"][0]
    assert version["drift"] == "on" and version["rows"] == len(rows)
    assert (version["prediction"]["name"], version["prediction"]["kind"]) == ("label", "categorical")
