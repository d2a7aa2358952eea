"""What the direct readers refuse, and how: the compile step's one-line ``Unservable`` for a service
the SDK must keep (so the caller can fall back), a ``LayoutError`` at open for a store or spec of
a layout they do not know, the request's own errors for keys the store cannot hold."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from feast_access.online.compile import compile_repository, compile_service, main
from feast_access.online.errors import LayoutError, Unservable
from feast_access.online.reader import open_reader
from feast_access.online.spec import REFUSED_FILE, ServiceSpec, StoreSpec, spec_path
from tests.feast_access import helpers


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return helpers.build_store(tmp_path_factory.mktemp("refusals"), "sqlite", 3)


@pytest.fixture(scope="module")
def spec(store: Any) -> ServiceSpec:
    return compile_service(store, helpers.EVERYTHING)


def other_store(store: Any, online_store: dict[str, Any]) -> Any:
    """The same registry, under another online-store configuration."""
    from feast import FeatureStore, RepoConfig

    config = RepoConfig(
        project=store.config.project,
        provider="local",
        registry=store.config.registry.path,
        offline_store={"type": "file"},
        online_store=online_store,
        entity_key_serialization_version=3,
        repo_path=store.repo_path,
    )
    return FeatureStore(repo_path=str(store.repo_path), config=config)


@pytest.mark.parametrize(
    ("service", "online_store", "says"),
    [
        (helpers.ON_DEMAND, None, "view 'scaled' is an on-demand view"),
        ("no_such_service", None, "feature service 'no_such_service' is not in the registry"),
        (helpers.EVERYTHING, {"type": "remote", "path": "http://127.0.0.1:1"}, "online store type 'remote'"),
        (
            helpers.EVERYTHING,
            {"type": "redis", "redis_type": "redis_cluster", "connection_string": "h:1"},
            "Redis type 'redis_cluster'",
        ),
        (helpers.EVERYTHING, {"type": "redis", "connection_string": "h:1,ssl=true"}, "TLS"),
    ],
    ids=["on-demand", "unknown-service", "remote-store", "redis-cluster", "redis-tls"],
)
def test_compile_refuses_what_the_sdk_must_keep(
    store: Any, service: str, online_store: dict[str, Any] | None, says: str
) -> None:
    target = store if online_store is None else other_store(store, online_store)
    with pytest.raises(Unservable, match=says) as caught:
        compile_service(target, service)
    assert "\n" not in str(caught.value)


def test_two_views_one_name_needs_full_names(store: Any) -> None:
    """Two views serving ``f_int64`` under one name: refused, unless the output is view__feature."""
    from feast import FeatureService

    scalars = store.get_feature_view(helpers.SCALARS)
    clash = FeatureService(
        name="clash", features=[scalars[["f_int64"]], scalars[["f_int64"]].with_name("again")]
    )
    store.apply([clash])
    with pytest.raises(Unservable, match=r"\['f_int64'\].*full feature names"):
        compile_service(store, "clash")
    assert compile_service(store, "clash", full_feature_names=True).outputs == [
        "scalars__f_int64",
        "again__f_int64",
    ]


def test_cli_writes_the_spec_or_one_error_line(
    store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = Path(store.repo_path)
    (repo / "feature_store.yaml").write_text(
        f"project: {store.config.project}\nprovider: local\nregistry: registry.db\n"
        "offline_store:\n  type: file\nonline_store:\n  type: sqlite\n  path: online.db\n"
        "entity_key_serialization_version: 3\n"
    )
    out = tmp_path / "specs" / "everything.json"
    assert main([str(repo), helpers.EVERYTHING, "--out", str(out)]) == 0
    assert open_reader(out).spec.outputs[:2] == ["f_int32", "f_int64"]
    capsys.readouterr()
    assert main([str(repo), helpers.ON_DEMAND, "--out", str(tmp_path / "refused.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: view 'scaled' is an on-demand view") and err[1].startswith("hint: ")
    assert len(err) == 2 and not (tmp_path / "refused.json").exists()


def test_a_spec_from_an_unknown_feast_is_refused_at_open(spec: ServiceSpec, tmp_path: Path) -> None:
    newer = tmp_path / "newer.json"
    newer.write_text(spec.to_json().replace('"0.67.0"', '"0.68.0"'))
    with pytest.raises(
        LayoutError, match=r"compiled with Feast 0\.68\.0; the direct reader knows .* 0\.67\.0"
    ):
        open_reader(newer)
    with pytest.raises(LayoutError, match="not a feature spec"):
        ServiceSpec.from_json('{"service": "x"}')
    with pytest.raises(LayoutError, match="cannot read feature spec"):
        open_reader(tmp_path / "absent.json")


def test_a_store_not_as_feast_left_it_is_refused_at_open(spec: ServiceSpec, tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match="does not exist"):
        open_reader(spec, sqlite_path=tmp_path / "absent.db")
    other_project = dataclasses.replace(spec, project="other")
    with pytest.raises(LayoutError, match="has no table 'other_scalars'"):
        open_reader(other_project)
    import sqlite3

    legacy = tmp_path / "legacy.db"
    with sqlite3.connect(legacy) as conn:
        for view in spec.views:
            conn.execute(
                f'CREATE TABLE "{spec.project}_{view.name}" (entity_key BLOB, feature_name TEXT, value BLOB)'
            )
    with pytest.raises(LayoutError, match=r"lacks \['event_ts'\]"):
        open_reader(spec, sqlite_path=legacy)


@pytest.mark.parametrize(
    ("row", "error", "says"),
    [
        ({"user_id": 2**63, "device_id": "d-1"}, ValueError, "out of int64 range"),
        ({"user_id": "1", "device_id": "d-1"}, TypeError, "INT64 join key takes an int"),
        ({"user_id": 1, "device_id": 5}, TypeError, "STRING join key takes a str"),
        ({"user_id": 1, "device_id": "\ud800"}, ValueError, "surrogate"),
        ({"user_id": 1}, ValueError, "no join key 'device_id'"),
    ],
    ids=["int-range", "int-type", "string-type", "not-utf8", "missing-key"],
)
def test_keys_the_store_cannot_hold_are_the_requests_error(
    spec: ServiceSpec, row: dict[str, Any], error: type[Exception], says: str
) -> None:
    """ValueError / TypeError, as Feast's own key encoding raises them (the gateway answers 422)."""
    reader = open_reader(spec)
    try:
        with pytest.raises(error, match=says):
            reader.read([row])
        assert reader.read([{"user_id": 1, "device_id": "d-1"}]).values["f_int64"] == [1234]  # still serving
    finally:
        reader.close()


def test_redis_store_spec_on_sqlite_reader_refused(spec: ServiceSpec) -> None:
    from feast_access.online.sqlite import SqliteReader

    redis_spec = dataclasses.replace(spec, store=StoreSpec(type="redis", connection_string="127.0.0.1:1"))
    with pytest.raises(LayoutError, match="is for a redis store, not sqlite"):
        SqliteReader(redis_spec)


def test_a_repository_compiles_into_a_folder_with_its_refusals(store: Any, tmp_path: Path) -> None:
    """Every service a spec, each one the readers cannot serve named in refused.json with why."""
    refused = compile_repository(store, tmp_path / "specs")
    assert open_reader(spec_path(tmp_path / "specs", helpers.EVERYTHING)).spec.service == helpers.EVERYTHING
    assert "on-demand view" in refused[helpers.ON_DEMAND]
    assert not spec_path(tmp_path / "specs", helpers.ON_DEMAND).exists()
    assert json.loads((tmp_path / "specs" / REFUSED_FILE).read_text()) == refused
    assert not [p for p in (tmp_path / "specs").iterdir() if p.name.startswith(".")]  # no temp files left
