"""Payloads, answer checks, load profiles and options: the Locust-free parts the users rely on."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from loadtests.payloads import EntityRows, ModelInputs, parse_id_range
from loadtests.profiles import spike, steady, step
from loadtests.responses import gateway_problem, grpc_problem, v2_problem
from loadtests.settings import LoadOptions
from tests.loadtests.gateway_standin import contract_problem


def test_gateway_rows_follow_the_contract_and_the_entity_ranges() -> None:
    rows = EntityRows("1-500", "1-100", seed=3)
    body = rows.body(200)
    assert contract_problem(body) is None  # the same check the gateway stand-in applies
    users = {r["user_id"] for r in body["rows"]}
    assert min(users) >= 1 and max(users) <= 500 and len(users) > 100  # spread, not one hot key
    again = EntityRows("1-500", "1-100", seed=3).body(200)
    assert again == body  # reproducible per seed


@pytest.mark.parametrize("text", ["", "a-b", "5-1", "-3"])
def test_bad_id_ranges_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="bad id range"):
        parse_id_range(text)


def exported_repo(tmp_path: Path, example: list[float]) -> Path:
    """A repository laid out as `builder export` writes it (metadata signature + warm-up row)."""
    model = tmp_path / "repo" / "m"
    (model / "1").mkdir(parents=True)
    (model / "3").mkdir()
    (model / "warmup").mkdir()
    signature = {"inputs": [{"name": "input", "dtype": "float32", "shape": [-1, len(example)]}]}
    for version in ("1", "3"):
        (model / version / "metadata.json").write_text(json.dumps({"signature": signature}))
    (model / "warmup" / "input").write_bytes(np.asarray(example, dtype=np.float32).tobytes())
    return tmp_path / "repo"


def test_triton_inputs_are_the_input_example_jittered(tmp_path: Path) -> None:
    example = [40.0, 13.0, 0.5, 900.0, 2.0]
    inputs = ModelInputs.from_repo(exported_repo(tmp_path, example), "m", seed=1)
    assert inputs is not None
    batch = inputs.batch(4)["input"]
    assert batch.shape == (4, 5) and batch.dtype == np.float32
    np.testing.assert_allclose(batch, np.tile(example, (4, 1)), rtol=0.06, atol=0.01)
    assert not np.array_equal(batch[0], batch[1])  # not the same bytes every time
    body = inputs.v2_json(2)
    assert body["inputs"][0]["shape"] == [2, 5] and body["inputs"][0]["datatype"] == "FP32"
    assert len(body["inputs"][0]["data"]) == 10


def test_no_local_model_means_the_servers_signature(tmp_path: Path) -> None:
    assert ModelInputs.from_repo(tmp_path, "absent") is None
    inputs = ModelInputs.from_v2_metadata(
        {"name": "m", "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 5]}]}, seed=2
    )
    assert inputs.batch(3)["input"].shape == (3, 5)


def test_answer_checks() -> None:
    ok = json.dumps({"model": "m", "version": "1", "predictions": [{"score": 0.2, "label": 0}]})
    assert gateway_problem(200, ok, 1) is None
    assert gateway_problem(200, ok, 2) == "expected 2 prediction(s), got 1"
    assert gateway_problem(503, "triton down", 1) == "HTTP 503: triton down"
    assert gateway_problem(0, None, 1) == "no response"
    v2 = json.dumps({"outputs": [{"name": "label", "shape": [2, 1], "datatype": "INT64", "data": [0, 1]}]})
    assert v2_problem(200, v2, 2) is None
    assert v2_problem(200, v2, 3) == "output 'label' has shape [2, 1], expected 3 row(s)"
    assert v2_problem(200, "{}", 1) == "answer has no outputs"
    assert grpc_problem([("probabilities", [1, 2])], 1) is None
    assert grpc_problem([], 1) == "answer has no outputs"


def test_profiles_scale_with_users_spawn_rate_and_run_time() -> None:
    common: dict[str, Any] = {"users": 8, "spawn_rate": 2.0, "run_time": 40.0}
    assert steady(0, **common) == steady(39.9, **common) == (8, 2.0)
    assert steady(40, **common) is None
    assert [step(t, **common) for t in (0, 10, 20, 30, 39)] == [(n, 2.0) for n in (2, 4, 6, 8, 8)]
    assert step(40, **common) is None
    base, burst = spike(0, **common), spike(20, **common)
    assert base == (2, 8.0) and burst == (8, 8.0)  # a spike arrives within a second
    assert spike(35, **common) == base
    assert spike(40, **common) is None


def test_options_come_from_locusts_namespace_and_back() -> None:
    namespace = SimpleNamespace(model="m", model_version="2", rows_per_request="4", seed=None)
    options = LoadOptions.from_namespace(namespace, environ={"LOADTESTS_API_KEY": "k"})
    assert (options.model, options.model_version, options.rows_per_request, options.api_key) == (
        "m",
        "2",
        4,
        "k",
    )
    args = options.to_locust_args()
    assert args[args.index("--rows-per-request") + 1] == "4"
    assert "k" not in args  # secrets never go on a command line
    with pytest.raises(ValueError, match="rows-per-request"):
        LoadOptions.from_namespace(SimpleNamespace(rows_per_request=0), environ={})
