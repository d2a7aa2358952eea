"""Payloads, answer checks, load profiles and options: the Locust-free parts the users rely on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from loadtests.payloads import (
    DEFAULT_VOCABULARY,
    EntityRows,
    ModelInputs,
    parse_bytes,
    parse_channels,
    parse_id_range,
    serialize_bytes,
)
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
    assert {r["channel"] for r in body["rows"]} == {"web", "app", "pos"}  # the default channels


def test_gateway_rows_take_the_configured_channels() -> None:
    rows = EntityRows("1-5", "1-5", seed=1, channels=parse_channels(" kiosk, phone ")).body(50)["rows"]
    assert {r["channel"] for r in rows} == {"kiosk", "phone"}
    # no channels configured: rows for a model without the field
    bare = EntityRows("1-5", "1-5", seed=1, channels=parse_channels("")).body(3)["rows"]
    assert all(set(r) == {"user_id", "merchant_id", "amount", "hour"} for r in bare)


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


# -- which entities the gateway user sends -----------------------------------------------------

FEATURE_STORE_YAML = Path(__file__).resolve().parents[2] / "feature_repo" / "feature_store.yaml"


def shop_feature_repo(root: Path) -> Path:
    """A real Feast repo (SQLite online store), not the demo's: a STRING-keyed customer view and
    an int-keyed store view in one service. Customers C-1..C-6 are online; C-7, C-8 only have
    snapshots older than the TTL (never materialized); C-9 got its snapshot after the last
    materialization (offline, within the TTL, not online)."""
    import pandas as pd
    from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
    from feast.types import Float64, String

    from feature_repo.store import open_store

    (root / "data").mkdir(parents=True)
    (root / "feature_store.yaml").write_text(FEATURE_STORE_YAML.read_text())
    now = pd.Timestamp.now(tz="UTC")
    fresh, stale = now - pd.Timedelta(hours=1), now - pd.Timedelta(days=10)
    customers = pd.DataFrame(
        {
            "customer_id": [f"C-{i}" for i in range(1, 9)],
            "segment": ["gold", "silver"] * 4,
            "event_timestamp": [fresh] * 6 + [stale] * 2,
        }
    )
    stores = pd.DataFrame(
        {"store_id": [1, 2, 3], "footfall": [10.0, 20.0, 30.0], "event_timestamp": [fresh] * 3}
    )
    customers.to_parquet(root / "data" / "customers.parquet")
    stores.to_parquet(root / "data" / "stores.parquet")

    def view(name: str, key: str, value_type: ValueType, field: Field) -> tuple[Entity, FeatureView]:
        entity = Entity(name=name, join_keys=[key], value_type=value_type)
        source = FileSource(
            name=f"{name}_source", path=f"data/{name}s.parquet", timestamp_field="event_timestamp"
        )
        return entity, FeatureView(
            name=f"{name}_stats", entities=[entity], ttl=timedelta(days=2), schema=[field], source=source
        )

    customer, customer_stats = view(
        "customer", "customer_id", ValueType.STRING, Field(name="segment", dtype=String)
    )
    shop, store_stats = view("store", "store_id", ValueType.INT64, Field(name="footfall", dtype=Float64))
    store = open_store(root)
    service = FeatureService(name="shop_v1", features=[customer_stats, store_stats])
    store.apply([customer, shop, customer_stats, store_stats, service])
    store.materialize_incremental(end_date=datetime.now(UTC))
    late = pd.DataFrame({"customer_id": ["C-9"], "segment": ["gold"], "event_timestamp": [fresh]})
    pd.concat([customers, late]).to_parquet(root / "data" / "customers.parquet")
    return root


def shop_model_repo(root: Path) -> Path:
    """An export's metadata.json as `builder export` writes it: the run's feast tags, the columns."""
    version = root / "shop-model" / "1"
    version.mkdir(parents=True)
    metadata = {
        "tags": {
            "feast.feature_service": "shop_v1",
            "feast.entity_keys": "customer_id,store_id",
            "feast.request_fields": "basket,promo",
        },
        "serving": {
            "columns": [
                {"name": "segment", "dtype": "string"},
                {"name": "footfall", "dtype": "float32"},
                {"name": "basket", "dtype": "float32"},
                {"name": "promo", "dtype": "bool"},
            ]
        },
    }
    (version / "metadata.json").write_text(json.dumps(metadata))
    return root


def test_the_gateway_user_draws_only_entities_the_online_store_has(tmp_path: Path) -> None:
    from loadtests.payloads import gateway_rows

    options = LoadOptions(
        model="shop-model",
        model_repo=str(shop_model_repo(tmp_path / "models")),
        feature_repo=str(shop_feature_repo(tmp_path / "features")),
    )
    rows = gateway_rows(options, seed=1).body(300)["rows"]
    assert {r["customer_id"] for r in rows} == {f"C-{i}" for i in range(1, 7)}  # not C-7..C-9
    assert {r["store_id"] for r in rows} == {1, 2, 3}
    # the model's request fields, by their dtypes; none of the demo's
    assert all(set(r) == {"customer_id", "store_id", "basket", "promo"} for r in rows)
    assert all(isinstance(r["basket"], float) and isinstance(r["promo"], bool) for r in rows)
    json.dumps(rows)  # plain JSON values, no numpy scalars


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_entity_file_gives_the_rows(tmp_path: Path, suffix: str) -> None:
    import pandas as pd

    from loadtests.payloads import gateway_rows

    frame = pd.DataFrame(
        {
            "customer_id": ["C-1", "C-2"],
            "store_id": [7, 8],
            "promo": [True, False],
            "event_timestamp": pd.Timestamp.now(tz="UTC"),
        }
    )
    path = tmp_path / f"entities{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    options = LoadOptions(
        model="shop-model", model_repo=str(shop_model_repo(tmp_path / "models")), entities=str(path)
    )
    rows = gateway_rows(options, seed=1).body(50)["rows"]
    assert {(r["customer_id"], r["store_id"]) for r in rows} == {("C-1", 7), ("C-2", 8)}
    assert all("event_timestamp" not in r and isinstance(r["basket"], float) for r in rows)
    assert {r["promo"] for r in rows if r["customer_id"] == "C-1"} == {True}  # the file's value is kept


def test_entity_sources_that_cannot_give_entities_say_why(tmp_path: Path) -> None:
    from loadtests.payloads import EntityError, gateway_rows

    models = str(shop_model_repo(tmp_path / "models"))
    (tmp_path / "e.json").write_text("{}")
    for options, message in (
        (LoadOptions(model="shop-model", entities=str(tmp_path / "e.json")), "neither .parquet nor .csv"),
        (LoadOptions(model="shop-model", entities=str(tmp_path / "none.csv")), "does not exist"),
        (
            LoadOptions(model="shop-model", model_repo=models, feature_repo=str(tmp_path)),
            "feature_store.yaml",
        ),
    ):
        with pytest.raises(EntityError, match=message):
            gateway_rows(options, seed=0)
    # the default folder, unusable (a checkout's unapplied feature_repo/): the id ranges, as before
    row = gateway_rows(
        LoadOptions(model="shop-model", model_repo=models, feature_repo="feature_repo"), 0
    ).row()
    assert {"user_id", "merchant_id"} <= set(row)
