"""Triton payloads, answer checks, load profiles and options: the Locust-free parts the users rely on."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from loadtests.payloads import DEFAULT_VOCABULARY, ModelInputs, parse_bytes, serialize_bytes
from loadtests.profiles import spike, steady, step
from loadtests.responses import gateway_problem, grpc_problem, v2_problem
from loadtests.settings import LoadOptions


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


# A "columns" export (docs/serving-contract.md): one [N, 1] input per column, named after it.
COLUMNS = {
    "amount": ("float32", np.float32(42.5)),
    "hour": ("int64", np.int64(13)),
    "is_new": ("bool", np.bool_(True)),
    "channel": ("string", "pos"),
}


def columns_repo(tmp_path: Path, *, warmup: bool = True, input_example: Any = None) -> Path:
    """A repository as `builder export` writes a per-column model: the signature, and a warm-up
    file per input (raw bytes; Triton's serialized BYTES format for the string)."""
    model = tmp_path / "repo" / "m"
    (model / "1").mkdir(parents=True)
    (model / "warmup").mkdir()
    signature = {
        "inputs": [{"name": n, "dtype": dtype, "shape": [-1, 1]} for n, (dtype, _) in COLUMNS.items()]
    }
    meta: dict[str, Any] = {"signature": signature}
    if input_example is not None:
        meta["input_example"] = input_example
    (model / "1" / "metadata.json").write_text(json.dumps(meta))
    if warmup:
        for name, (dtype, value) in COLUMNS.items():
            data = serialize_bytes([value]) if dtype == "string" else np.asarray([value]).tobytes()
            (model / "warmup" / name).write_bytes(data)
    return tmp_path / "repo"


def test_typed_columns_come_from_the_models_warmup_row(tmp_path: Path) -> None:
    inputs = ModelInputs.from_repo(columns_repo(tmp_path), "m", seed=4)
    assert inputs is not None
    batch = inputs.batch(3)
    assert {n: a.shape for n, a in batch.items()} == dict.fromkeys(COLUMNS, (3, 1))
    assert batch["channel"].dtype == object and batch["channel"].ravel().tolist() == ["pos"] * 3
    assert batch["hour"].dtype == np.int64 and batch["hour"].ravel().tolist() == [13] * 3
    assert batch["is_new"].dtype == np.bool_ and batch["is_new"].all()
    assert batch["amount"].dtype == np.float32
    np.testing.assert_allclose(batch["amount"], 42.5, rtol=0.06)
    assert len(set(batch["amount"].ravel().tolist())) == 3  # floats still vary per row


def test_v2_json_sends_strings_as_json_strings(tmp_path: Path) -> None:
    inputs = ModelInputs.from_repo(columns_repo(tmp_path), "m", seed=4)
    assert inputs is not None
    body = json.loads(json.dumps(inputs.v2_json(2)))  # what goes over the wire
    by_name = {i["name"]: i for i in body["inputs"]}
    assert {n: (i["datatype"], i["shape"]) for n, i in by_name.items()} == {
        "amount": ("FP32", [2, 1]),
        "hour": ("INT64", [2, 1]),
        "is_new": ("BOOL", [2, 1]),
        "channel": ("BYTES", [2, 1]),
    }
    assert by_name["channel"]["data"] == ["pos", "pos"]
    assert by_name["hour"]["data"] == [13, 13] and by_name["is_new"]["data"] == [True, True]


def test_string_inputs_without_a_warmup_row(tmp_path: Path) -> None:
    # An input example recorded in metadata.json gives the value...
    example = {"columns": list(COLUMNS), "data": [[40.0, 3, False, "web"]]}
    inputs = ModelInputs.from_repo(columns_repo(tmp_path / "a", warmup=False, input_example=example), "m")
    assert inputs is not None
    assert inputs.batch(2)["channel"].ravel().tolist() == ["web", "web"]
    # ...else values come from the fixed vocabulary, as from a server's metadata (BYTES inputs).
    bare = ModelInputs.from_repo(columns_repo(tmp_path / "b", warmup=False), "m", seed=1)
    assert bare is not None
    drawn = bare.batch(50)["channel"].ravel().tolist()
    assert set(drawn) <= set(DEFAULT_VOCABULARY) and len(set(drawn)) > 1
    served = ModelInputs.from_v2_metadata(
        {"inputs": [{"name": "channel", "datatype": "BYTES", "shape": [-1, 1]}]}, seed=1
    )
    assert set(served.v2_json(20)["inputs"][0]["data"]) <= set(DEFAULT_VOCABULARY)


def test_a_damaged_string_warmup_file_falls_back_to_the_vocabulary(tmp_path: Path) -> None:
    repo = columns_repo(tmp_path)
    (repo / "m" / "warmup" / "channel").write_bytes(b"\x09\x00\x00\x00pos")  # says 9 bytes, has 3
    inputs = ModelInputs.from_repo(repo, "m")
    assert inputs is not None
    assert set(inputs.batch(5)["channel"].ravel().tolist()) <= set(DEFAULT_VOCABULARY)


def test_bytes_encoding_is_tritons() -> None:
    from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

    values = ["web", "", "café"]
    encoded = serialize_bytes(values)
    assert encoded == serialize_byte_tensor(np.array(values, dtype=object)).item()
    assert parse_bytes(encoded) == [v.encode() for v in values]
    assert deserialize_bytes_tensor(encoded).tolist() == [v.encode() for v in values]
    with pytest.raises(ValueError, match="truncated"):
        parse_bytes(encoded[:2])


def test_grpc_requests_carry_strings_as_bytes_tensors(tmp_path: Path) -> None:
    from tritonclient.grpc import InferInput
    from tritonclient.utils import deserialize_bytes_tensor

    from loadtests.v2_grpc import infer_request

    inputs = ModelInputs.from_repo(columns_repo(tmp_path), "m", seed=4)
    assert inputs is not None
    batch = inputs.batch(2)
    request = infer_request("m", "1", batch)
    assert (request.model_name, request.model_version) == ("m", "1")
    tensors = {t.name: (t.datatype, list(t.shape)) for t in request.inputs}
    assert tensors == {
        "amount": ("FP32", [2, 1]),
        "hour": ("INT64", [2, 1]),
        "is_new": ("BOOL", [2, 1]),
        "channel": ("BYTES", [2, 1]),
    }
    contents = dict(zip([t.name for t in request.inputs], request.raw_input_contents, strict=True))
    assert deserialize_bytes_tensor(contents["channel"]).tolist() == [b"pos", b"pos"]
    assert np.frombuffer(contents["hour"], dtype=np.int64).tolist() == [13, 13]
    # The same tensor as tritonclient's own InferInput builds from an object array.
    reference = InferInput("channel", [2, 1], "BYTES")
    reference.set_data_from_numpy(batch["channel"])
    assert reference.datatype() == tensors["channel"][0]
    assert reference._get_content() == contents["channel"]


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
