"""The direct readers answer exactly what ``FeatureStore.get_online_features(...).to_dict()`` answers
on the same store after Feast's own materialize (issue 33, item 2): every value type the readers
serve, missing and repeated entities, a composite key, rows older than their view's TTL, a
projection (alias, subset, join-key map) with and without full feature names; on SQLite and on a
real Redis; with entity keys serialized at versions 2 and 3."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from feast_access.online.compile import compile_service
from feast_access.online.reader import open_reader, to_feast_dict
from feast_access.online.redis import RedisReader
from support import servers
from tests.feast_access import helpers

CASES = [("sqlite", 3), ("sqlite", 2), ("redis", 3), ("redis", 2)]


@dataclass
class Built:
    kind: str
    version: int
    store: Any
    redis_address: str | None


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.RedisServer]:
    with servers.redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module", params=CASES, ids=[f"{k}-v{v}" for k, v in CASES])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    kind, version = request.param
    address = None
    if kind == "redis":
        server: servers.RedisServer = request.getfixturevalue("redis")
        # version 3 in database 1: the reader's SELECT is exercised too
        address = server.address if version == 2 else f"{server.address},db=1"
    root = tmp_path_factory.mktemp(f"{kind}-v{version}")
    return Built(kind, version, helpers.build_store(root, kind, version, address), address)


def feast_read(built: Built, service: str, rows: list[dict[str, Any]], full: bool = False) -> dict[str, Any]:
    store = built.store
    with helpers.quiet_v2(built.version):
        response = store.get_online_features(
            features=store.get_feature_service(service), entity_rows=rows, full_feature_names=full
        )
        return dict(response.to_dict(include_event_timestamps=True))


def direct_read(built: Built, service: str, rows: list[dict[str, Any]], full: bool = False) -> dict[str, Any]:
    spec = compile_service(built.store, service, full)
    reader = open_reader(spec)
    try:
        return to_feast_dict(spec, rows, reader.read(rows), include_event_timestamps=True)
    finally:
        reader.close()


def test_every_type_and_missing_entity_as_feast(built: Built) -> None:
    rows = helpers.entity_rows()
    mine = direct_read(built, helpers.EVERYTHING, rows)
    feast = feast_read(built, helpers.EVERYTHING, rows)
    assert helpers.differences(mine, feast) == []
    # the suite would pass vacuously on an empty store: these are the values materialize wrote
    assert mine["f_string"][0] == "grocery" and mine["l_string"][0] == ["a", "", "ü" * 100]
    assert mine["f_int64"][2] is None and mine["f_int64__ts"][2] == 0  # the missing user


def test_one_row_as_feast(built: Built) -> None:
    """One request row takes the readers' shortest path; it must answer the same."""
    for row in helpers.entity_rows():
        assert (
            helpers.differences(
                direct_read(built, helpers.EVERYTHING, [row]), feast_read(built, helpers.EVERYTHING, [row])
            )
            == []
        ), row


@pytest.mark.parametrize("full", [False, True], ids=["short-names", "full-names"])
def test_projection_as_feast(built: Built, full: bool) -> None:
    rows = helpers.entity_rows({"user_id": "buyer_id"})
    for row in rows:
        row["user_id"] = row["buyer_id"]  # the stale view keeps the view's own key name
    mine = direct_read(built, helpers.PROJECTED, rows, full)
    assert helpers.differences(mine, feast_read(built, helpers.PROJECTED, rows, full)) == []
    assert ("renamed__f_string" in mine) is full and ("pairs__score" in mine) is full


def test_rows_older_than_ttl_are_served_as_feast_serves_them(built: Built) -> None:
    """Feast 0.67's online read does not apply a view's TTL (only pre-computed vectors do):
    user 1's ``stale`` row is three days old under a two-hour TTL, and Feast serves it."""
    rows = [{"user_id": 1, "device_id": "d-1"}, {"user_id": 2, "device_id": "d-1"}]
    feast = feast_read(built, helpers.EVERYTHING, rows)
    assert feast["risk"] == [0.9, 0.1]  # if a Feast upgrade starts expiring it, this says so first
    assert direct_read(built, helpers.EVERYTHING, rows)["risk"] == [0.9, 0.1]
    assert feast["risk__ts"][0] == int(helpers.OLD.timestamp())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_redis_async_read_as_feast(built: Built, loop: str) -> None:
    """On asyncio's loop and on uvloop (the gateway's)."""
    if built.kind != "redis":
        pytest.skip("the asyncio path is Redis'")
    spec = compile_service(built.store, helpers.EVERYTHING)
    rows = helpers.entity_rows()
    reader = RedisReader(spec)

    async def both() -> tuple[Any, Any]:
        try:  # two reads in flight on one connection: each gets its own replies
            return await asyncio.gather(reader.read_async(rows), reader.read_async(rows[1:2]))
        finally:
            await reader.aclose()

    if loop == "uvloop":
        import uvloop

        many, one = uvloop.run(both())
    else:
        many, one = asyncio.run(both())
    feast = feast_read(built, helpers.EVERYTHING, rows)
    assert helpers.differences(to_feast_dict(spec, rows, many, True), feast) == []
    assert (
        helpers.differences(
            to_feast_dict(spec, rows[1:2], one, True), feast_read(built, helpers.EVERYTHING, rows[1:2])
        )
        == []
    )


def test_spec_survives_json(built: Built, tmp_path: Path) -> None:
    """The serving process reads the spec from its file, not from the compile step's object."""
    spec = compile_service(built.store, helpers.EVERYTHING)
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    reader = open_reader(path)
    rows = helpers.entity_rows()
    try:
        mine = to_feast_dict(reader.spec, rows, reader.read(rows), True)
    finally:
        reader.close()
    assert reader.spec == spec
    assert helpers.differences(mine, feast_read(built, helpers.EVERYTHING, rows)) == []


SERVING_PROCESS = """
import json, sys
from feast_access.online.reader import open_reader, to_feast_dict
reader = open_reader(sys.argv[1])
rows = json.loads(sys.argv[2])
answer = to_feast_dict(reader.spec, rows, reader.read(rows))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("feast", "pandas", "pyarrow", "google"))
print(json.dumps({"heavy": heavy, "f_int64": answer["f_int64"], "l_string": answer["l_string"]}))
"""


def test_serving_process_imports_no_feast_pandas_or_pyarrow(built: Built, tmp_path: Path) -> None:
    """A fresh process that opens the reader and reads (the serving process's whole path) has
    not imported Feast, pandas, pyarrow, nor even protobuf."""
    import json
    import subprocess
    import sys

    if built.version != 3:
        pytest.skip("once per store")
    spec = tmp_path / "spec.json"
    spec.write_text(compile_service(built.store, helpers.EVERYTHING).to_json())
    rows = [{"user_id": 1, "device_id": "d-1"}, {"user_id": helpers.MISSING_USER, "device_id": "d-2"}]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SERVING_PROCESS, str(spec), json.dumps(rows)],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer == {"heavy": [], "f_int64": [1234, None], "l_string": [["a", "", "ü" * 100], []]}


OFF_UTC_PROCESS = """
import json, sys, time, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from feast_access.online.compile import compile_service
from feast_access.online.reader import open_reader, to_feast_dict
from tests.feast_access import helpers
store = helpers.build_store(Path(sys.argv[1]), "sqlite", 3)
spec = compile_service(store, helpers.EVERYTHING)
rows = helpers.entity_rows()
mine = to_feast_dict(spec, rows, open_reader(spec).read(rows), True)
feast = store.get_online_features(features=store.get_feature_service(helpers.EVERYTHING), entity_rows=rows)
diff = helpers.differences(mine, feast.to_dict(include_event_timestamps=True))
fresh = int(helpers.FRESH.timestamp())
print(json.dumps({"offset": time.timezone, "diff": diff, "ts": mine["f_int64__ts"][0], "fresh": fresh}))
"""


def test_sqlite_event_times_off_utc(tmp_path: Path) -> None:
    """Feast's SQLite store keeps the UTC wall time as local epoch seconds: on a machine in
    another zone the stored integer is off by the zone, and the reader corrects it as Feast's
    read does (both report the row's true event time)."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", OFF_UTC_PROCESS, str(tmp_path)],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "TZ": "Asia/Kolkata", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["offset"] == -19800  # the process ran at UTC+05:30
    assert answer["diff"] == [] and answer["ts"] == answer["fresh"]
