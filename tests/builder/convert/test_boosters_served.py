"""Boosters served by the real embedded Triton: a native XGBoost multi-class booster, a native
LightGBM regression booster and a CatBoost binary classifier are exported into one repository,
served (one Triton start), and asked over HTTP and gRPC; the answers must be the native
libraries' own predictions on the same float32 rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import servers
from tests.builder.convert.helpers import (
    Trained,
    new_rows,
    train_catboost,
    train_lgb_booster,
    train_xgb_booster,
)

pytestmark = pytest.mark.integration

TRAIN = {
    "serve-xgb-multi": lambda n: train_xgb_booster(n, "multi:softprob"),
    "serve-lgb-reg": lambda n: train_lgb_booster(n, "regression"),
    "serve-cb-binary": lambda n: train_catboost(n, "binary"),
}


@pytest.fixture(scope="module")
def served(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TritonServer, dict[str, Trained]]]:
    repo = tmp_path_factory.mktemp("served-boosters") / "model_repo"
    trained = {name: train(name) for name, train in TRAIN.items()}
    for name in trained:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    with servers.serving(
        repo, triton_runtime, tmp_path_factory.mktemp("triton-log") / "triton.log"
    ) as server:
        yield server, trained


def infer(server: TritonServer, protocol: str, model: str, x: np.ndarray, outputs: list[str]) -> dict:
    if protocol == "http":
        import tritonclient.http as client_lib

        client: Any = client_lib.InferenceServerClient(server.http_url)
    else:
        import tritonclient.grpc as client_lib  # type: ignore[no-redef]

        client = client_lib.InferenceServerClient(server.grpc_url)
    inp = client_lib.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(model, [inp], outputs=[client_lib.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


@pytest.mark.parametrize("name", list(TRAIN))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_serves_the_booster_as_the_native_library_predicts(
    served: tuple[TritonServer, dict[str, Trained]], name: str, protocol: str
):
    server, trained = served
    rows = new_rows()
    want = trained[name].native(rows)
    got = infer(server, protocol, name, rows.to_numpy(dtype=np.float32), list(want))
    for key, expected in want.items():
        assert got[key].shape == expected.shape, key
        if key == "label":
            assert got[key].dtype == np.int64
            np.testing.assert_array_equal(got[key], expected)
        else:
            assert got[key].dtype == np.float32, key
            np.testing.assert_allclose(got[key], expected, atol=1e-5, rtol=1e-5)
