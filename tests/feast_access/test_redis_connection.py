"""The Redis reader's connection, against a real redis-server: AUTH and SELECT from Feast's
connection string, a refused login as one error, and a Redis that goes away and comes back
(the read fails with OSError, the next one connects again), on the blocking and asyncio paths."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from feast_access.online.errors import StoreError
from feast_access.online.redis import RedisReader
from feast_access.online.spec import FeatureSpec, KeySpec, ServiceSpec, StoreSpec, ViewSpec
from support import servers

ROW = {"user_id": 1}


def spec(connection_string: str) -> ServiceSpec:
    view = ViewSpec(
        name="user_stats",
        name_to_use="user_stats",
        keys=(KeySpec("user_id", "user_id", "INT64"),),
        features=(FeatureSpec("tx", "tx", "INT64"),),
        ttl_s=None,
    )
    return ServiceSpec(
        service="s",
        project="p",
        feast_version="0.67.0",
        entity_key_serialization_version=3,
        full_feature_names=False,
        store=StoreSpec(type="redis", connection_string=connection_string),
        views=(view,),
    )


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[servers.RedisServer]:
    with servers.redis_server(tmp_path) as server:
        yield server


def command(server: servers.RedisServer, line: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(line + b"\r\n")
        return conn.recv(4096)


def test_login_and_database_from_the_connection_string(redis: servers.RedisServer) -> None:
    assert command(redis, b"ACL SETUSER reader on >secret ~* +@read +select") == b"+OK\r\n"
    reader = RedisReader(spec(f"{redis.address},username=reader,password=secret,db=2"))
    assert reader.read([ROW]).values == {"tx": [None]}  # logged in, database 2, no such entity
    reader.close()

    refused = RedisReader(spec(f"{redis.address},username=reader,password=wrong"))
    with pytest.raises(StoreError, match="refused the connection's setup: WRONGPASS"):
        refused.read([ROW])

    async def refused_async() -> None:
        try:
            await refused.read_async([ROW])
        finally:
            await refused.aclose()

    with pytest.raises(StoreError, match="WRONGPASS"):
        asyncio.run(refused_async())


def test_a_redis_that_goes_away_and_comes_back(redis: servers.RedisServer) -> None:
    reader = RedisReader(spec(redis.address), timeout_s=2)

    async def cycle() -> list[object]:
        seen: list[object] = []
        seen.append((await reader.read_async([ROW])).values)
        redis.kill()
        await asyncio.sleep(0.05)  # the kernel tells the event loop the connection is gone
        try:
            await reader.read_async([ROW])
        except ConnectionError:  # refused: the loop saw the connection close and connected again
            seen.append("down")
        redis.restart()
        seen.append((await reader.read_async([ROW])).values)
        await reader.aclose()
        return seen

    assert reader.read([ROW]).values == {"tx": [None]}
    assert asyncio.run(cycle()) == [{"tx": [None]}, "down", {"tx": [None]}]
    redis.kill()
    with pytest.raises(OSError):
        reader.read([ROW])  # the blocking socket's connection died with the server too
    redis.restart()
    assert reader.read([ROW]).values == {"tx": [None]}
    reader.close()
