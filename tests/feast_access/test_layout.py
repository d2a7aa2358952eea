"""The byte layouts the readers reimplement, against Feast's own code on many more values than a
store holds: entity keys (``serialize_entity_key``, versions 2 and 3), ValueProto decoding
(``feast_value_type_to_python_type``), Redis' hash-field names (``_mmh3``)."""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest

from feast_access.online.errors import LayoutError
from feast_access.online.keys import key_encoder
from feast_access.online.spec import KeySpec
from feast_access.online.values import decode, decoder_for, timestamp_seconds
from tests.feast_access.helpers import same

KEY_FIELDS = {"INT64": "int64_val", "INT32": "int32_val", "STRING": "string_val"}


def feast_key(keys: list[KeySpec], row: dict[str, Any], version: int) -> bytes:
    from feast.infra.key_encoding_utils import serialize_entity_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    proto = EntityKey(
        join_keys=[k.join_key for k in keys],
        entity_values=[Value(**{KEY_FIELDS[k.value_type]: row[k.request_name]}) for k in keys],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # version 2's deprecation
        return bytes(serialize_entity_key(proto, entity_key_serialization_version=version))


@pytest.mark.parametrize("version", [2, 3])
def test_entity_keys_are_feasts_bytes(version: int) -> None:
    rng = random.Random(33)
    layouts = [
        [KeySpec("user_id", "user_id", "INT64")],
        [KeySpec("device", "device_id", "STRING")],
        [KeySpec("n", "n", "INT32")],
        # several keys: Feast sorts them by name; the request may name them otherwise
        [KeySpec("z", "zeta", "STRING"), KeySpec("buyer", "alpha", "INT64"), KeySpec("m", "mid", "INT32")],
    ]
    values = {
        "INT64": lambda: rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**63), 2**63)]),
        "INT32": lambda: rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randrange(-(2**31), 2**31)]),
        "STRING": lambda: rng.choice(
            ["", "a", "ü-ß", "x" * 300, "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(9))]
        ),
    }
    for keys in layouts:
        encode = key_encoder(keys, version)
        for _ in range(200):
            row = {k.request_name: values[k.value_type]() for k in keys}
            assert encode(row) == feast_key(keys, row, version), row


def feast_values() -> list[Any]:
    from feast.protos.feast.types import Value_pb2 as V

    return [
        V.Value(double_val=3.25),
        V.Value(double_val=float("nan")),
        V.Value(double_val=-0.0),
        V.Value(float_val=0.1),
        V.Value(int64_val=0),
        V.Value(int64_val=2**14),
        V.Value(int64_val=2**21 + 3),
        V.Value(int64_val=-5),
        V.Value(int64_val=2**63 - 1),
        V.Value(int32_val=-(2**31)),
        V.Value(int32_val=200),
        V.Value(bool_val=True),
        V.Value(bool_val=False),
        V.Value(string_val=""),
        V.Value(string_val="ünïcødé" * 30),
        V.Value(bytes_val=b"\x00\xff"),
        V.Value(unix_timestamp_val=1_700_000_000),
        V.Value(unix_timestamp_val=-(2**63)),  # Feast's null timestamp
        V.Value(),
        V.Value(null_val=V.NULL),
        V.Value(double_list_val=V.DoubleList(val=[1.5, float("inf")])),
        V.Value(float_list_val=V.FloatList(val=[0.1, -2])),
        V.Value(int64_list_val=V.Int64List(val=[-1, 2**40])),
        V.Value(int32_list_val=V.Int32List(val=[-3, 2**31 - 1])),
        V.Value(bool_list_val=V.BoolList(val=[True, False])),
        V.Value(string_list_val=V.StringList(val=["a", "", "b" * 200])),
        V.Value(bytes_list_val=V.BytesList(val=[b"", b"x"])),
        V.Value(unix_timestamp_list_val=V.Int64List(val=[0, 1_700_000_000, -(2**63)])),
        V.Value(double_list_val=V.DoubleList()),
    ]


def test_values_decode_as_feasts_to_dict() -> None:
    from feast.type_map import feast_value_type_to_python_type

    scalar = {"double_val": "DOUBLE", "float_val": "FLOAT", "int64_val": "INT64", "int32_val": "INT32"}
    scalar |= {"bool_val": "BOOL", "string_val": "STRING", "bytes_val": "BYTES"}
    for proto in feast_values():
        raw = proto.SerializeToString()
        want = feast_value_type_to_python_type(proto)
        kind = proto.WhichOneof("val")
        assert same(decode(raw), want), (kind, raw)
        assert same(decoder_for(scalar.get(kind or "", "ANY"))(raw), want), (kind, raw)


def test_a_value_type_the_reader_does_not_decode_is_a_layout_error() -> None:
    from feast.protos.feast.types.Value_pb2 import Value

    with pytest.raises(LayoutError, match="ValueProto field 32"):
        decoder_for("STRING")(Value(json_val="{}").SerializeToString())
    with pytest.raises(LayoutError, match="truncated"):
        decode(Value(string_val="abc").SerializeToString()[:-1])


def test_event_times_as_feast_reports_them() -> None:
    """Redis' ``_ts:<view>``: whole seconds, a fraction rounded through a float as Feast does."""
    from datetime import UTC, datetime

    from google.protobuf.timestamp_pb2 import Timestamp

    cases = [(0, 0), (1_700_000_000, 0), (1_700_000_000, 999_999_999), (1_700_000_000, 500_000)]
    cases += [(2**28, 0), (2**35 - 1, 0), (2**35, 0), (-1, 0), (253_402_300_799, 0)]  # the short path's edges
    for seconds, nanos in cases:
        raw = Timestamp(seconds=seconds, nanos=nanos).SerializeToString()
        back = Timestamp()
        back.FromDatetime(datetime.fromtimestamp(seconds + nanos / 1e9, tz=UTC))  # Feast's path
        assert timestamp_seconds(raw) == back.seconds, (seconds, nanos)
    assert timestamp_seconds(None) == 0


def test_hash_fields_are_feasts() -> None:
    from feast.infra.online_stores.helpers import _mmh3

    from feast_access.online.redis import field_name

    for view, feature in [("user_stats", "tx_last_24h"), ("v", "ü"), ("a:b", "")]:
        assert field_name(view, feature) == _mmh3(f"{view}:{feature}")
