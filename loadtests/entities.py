"""Gateway request rows: entity keys (a file, the online store, id ranges) + request-time fields.

Gateway rows carry entities the online store has, so that a gate with no error budget does not
fail on the load test's own data (an entity without online features is the gateway's 404), from
the first source that applies (``gateway_rows``):

1. ``--entities FILE``: a Parquet or CSV file of entity rows (the join keys, and any request
   fields to send as they are; ``event_timestamp``/``created_timestamp`` columns are ignored);
2. the feature repository (``--feature-repo``) and the model's serving facts in the exported
   repository (``--model-repo``: its feature service, join keys and request fields): the keys
   each feature view of the service has in the online store (``online_entities``), whatever
   their names and types;
3. neither: the demo generator's ranges, users ``1..500`` and merchants ``1..100`` (both
   configurable), where some ids may have no online features.

Request-time fields are the model's (``feast.request_fields``, typed by ``serving.columns``):
an amount, an hour of day and a channel (``web``/``app``/``pos``, configurable) as the demo's
generator draws them, any other by its dtype (a string field other than the channel: from
payloads.py's ``DEFAULT_VOCABULARY``). Triton request tensors are in loadtests/payloads.py.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from feast_access import EVENT_TIMESTAMP
from loadtests.payloads import DEFAULT_VOCABULARY
from serving_contract import ServingContract

if TYPE_CHECKING:
    import pandas as pd

    from loadtests.settings import LoadOptions

# The demo generator's channels (a string request field named ``channel`` draws from them).
DEFAULT_CHANNELS = ("web", "app", "pos")
# Entities whose online features expire sooner than this are left out of the pool (a gate runs
# for minutes; an hour's margin covers a long one).
EXPIRY_HORIZON = timedelta(hours=1)


def parse_id_range(text: str) -> tuple[int, int]:
    """``"1-500"`` -> (1, 500); a single number is a range of one."""
    low, sep, high = text.strip().partition("-")
    try:
        first = int(low)
        last = int(high) if sep else first
    except ValueError as exc:
        raise ValueError(f"bad id range {text!r}: write FIRST-LAST, e.g. 1-500") from exc
    if first < 0 or last < first:
        raise ValueError(f"bad id range {text!r}: need 0 <= FIRST <= LAST")
    return first, last


def parse_channels(text: str) -> tuple[str, ...]:
    """``"web,app,pos"`` -> ("web", "app", "pos"); empty text -> () (send no channel field)."""
    return tuple(c.strip() for c in text.split(",") if c.strip())


# Columns of an entity file that are not sent: Feast's entity-dataframe timestamps.
_TIMESTAMP_COLUMNS = frozenset({EVENT_TIMESTAMP, "created_timestamp"})
# Rows of each feature view checked against the online store (a sample beyond that).
ONLINE_CHECK_LIMIT = 20_000


class EntityError(ValueError):
    """No entities to send: the file or the store cannot give any (one line, says which)."""


class EntityPool:
    """Entity rows that exist, drawn at random: one row of each group per drawn row, merged.

    A group is the rows of keys that exist together (one feature view's join keys; views that
    share a key are joined on it); groups without a shared key are drawn independently."""

    def __init__(self, groups: Sequence[Sequence[Mapping[str, Any]]], source: str) -> None:
        if not groups or any(not g for g in groups):
            raise EntityError(f"no entity rows in {source}")
        self.groups = [list(g) for g in groups]
        self.source = source

    def draw(self, rng: random.Random) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for group in self.groups:
            row.update(rng.choice(group))
        return row


def _plain(value: Any) -> Any:
    """A value JSON carries: numpy scalars as Python ones."""
    return value.item() if isinstance(value, np.generic) else value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def entities_from_file(path: Path | str) -> EntityPool:
    """Entity rows from a Parquet or CSV file (the join keys, any request fields beside them)."""
    import pandas as pd

    path = Path(path).expanduser()
    if not path.is_file():
        raise EntityError(f"entity file {path} does not exist")
    try:
        if path.suffix.lower() == ".csv":
            frame = pd.read_csv(path)
        elif path.suffix.lower() in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        else:
            raise EntityError(f"entity file {path} is neither .parquet nor .csv")
    except (OSError, ValueError) as exc:
        if isinstance(exc, EntityError):
            raise
        raise EntityError(f"entity file {path} cannot be read: {exc}") from None
    frame = frame[[c for c in frame.columns if c not in _TIMESTAMP_COLUMNS]].dropna()
    return EntityPool([_records(frame)], str(path))


@dataclass(frozen=True)
class ServingFacts:
    """What the gateway rows of a model need from its export: the Feast feature service, its
    join keys, and the request-time fields with their served dtypes."""

    feature_service: str
    entity_keys: tuple[str, ...]
    request_fields: tuple[tuple[str, str], ...]  # (name, dtype)


def serving_facts(repo: Path, model: str, version: str = "") -> ServingFacts | None:
    """The model's Feast facts from its exported metadata.json, read through serving_contract
    (the run's ``feast.*`` tags, the columns' dtypes); None when the repository does not hold the
    model or it has none. The contract is read as a client that only sends rows reads it: the
    gateway is the one to refuse a model it cannot serve."""
    model_dir = repo / model
    versions = sorted(int(p.name) for p in model_dir.glob("*") if p.is_dir() and p.name.isdigit())
    if not versions:
        return None
    path = model_dir / (version or str(versions[-1])) / "metadata.json"
    try:
        contract = ServingContract.from_metadata(json.loads(path.read_text()), check=False)
    except (OSError, ValueError):  # ContractError is a ValueError
        return None
    if not contract.feature_service:
        return None
    dtypes = {c.name: c.dtype for c in contract.columns or ()}
    return ServingFacts(
        contract.feature_service,
        contract.entity_keys,
        tuple((f, dtypes.get(f, "float32")) for f in contract.request_fields),
    )


@functools.cache
def online_entities(feature_repo: str, service_name: str, limit: int = ONLINE_CHECK_LIMIT) -> EntityPool:
    """The entities the online store of ``feature_repo`` has every feature of ``service_name``
    for: per feature view, the keys its batch source holds within the view's TTL (what
    materialization loads), kept where an online read finds every feature of the view. Cached
    per process: every simulated user of a run draws from the same pool."""
    from feast.errors import FeastError

    from feast_access.store import open_store

    try:
        store = open_store(feature_repo)
        service = store.get_feature_service(service_name)
        frames = [_online_keys(store, p, limit) for p in service.feature_view_projections]
    except (FeastError, OSError, ValueError) as exc:
        raise EntityError(f"cannot read the entities of {service_name!r} in {feature_repo}: {exc}") from None
    components: list[pd.DataFrame] = []
    for frame in (f for f in frames if f is not None):
        for other in [c for c in components if set(c.columns) & set(frame.columns)]:
            frame = frame.merge(other, on=sorted(set(other.columns) & set(frame.columns)), how="inner")
            components.remove(other)
        components.append(frame.drop_duplicates().reset_index(drop=True))
    where = f"the online store of {feature_repo} (feature service {service_name!r}; materialized?)"
    return EntityPool([_records(c) for c in components], where)


def _online_keys(store: Any, projection: Any, limit: int) -> pd.DataFrame | None:
    """One view's keys (under the service's join-key names) that have all its features online;
    None for a view without entities (on-demand, entityless)."""
    from feast.errors import FeatureViewNotFoundException

    try:
        view = store.get_feature_view(projection.name)
    except FeatureViewNotFoundException:  # an on-demand view: computed, nothing stored
        return None
    keys = [c.name for c in view.entity_columns]
    if not keys:
        return None
    source = view.batch_source
    reverse = {v: k for k, v in (source.field_mapping or {}).items()}
    now = datetime.now(UTC)
    # An entity whose snapshot leaves the TTL during the run would be the gateway's 404 midway
    # (the demo's daily snapshots all expire at one time of day): keep those valid for the hour.
    horizon = min(EXPIRY_HORIZON, view.ttl / 2) if view.ttl else EXPIRY_HORIZON
    start = now - view.ttl + horizon if view.ttl else datetime(1970, 1, 1, tzinfo=UTC)
    features = [f.name for f in view.features]
    job = store._get_provider().offline_store.pull_latest_from_table_or_query(
        config=store.config,
        data_source=source,
        join_key_columns=[reverse.get(k, k) for k in keys],
        feature_name_columns=[reverse.get(f, f) for f in features],
        timestamp_field=source.timestamp_field,
        created_timestamp_column=source.created_timestamp_column or None,
        start_date=start,
        end_date=now,
    )
    frame = job.to_df().rename(columns={reverse.get(k, k): k for k in keys})[keys].drop_duplicates()
    if len(frame) > limit:
        frame = frame.sample(limit, random_state=0)
    rows = _records(frame)
    if not rows:
        return frame
    online = store.get_online_features(
        features=[f"{view.name}:{f}" for f in features], entity_rows=rows
    ).to_dict()
    present = [all(online[f][i] is not None for f in features) for i in range(len(rows))]
    kept = frame[present].rename(columns={k: projection.join_key_map.get(k, k) for k in keys})
    return kept.reset_index(drop=True)


class EntityRows:
    """Gateway rows: entities (from a pool of existing ones, else random ids from the ranges)
    plus the model's request-time fields."""

    def __init__(
        self,
        user_ids: str,
        merchant_ids: str,
        seed: int | str = 0,
        channels: Sequence[str] = DEFAULT_CHANNELS,
        pool: EntityPool | None = None,
        request_fields: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        self.users = parse_id_range(user_ids)
        self.merchants = parse_id_range(merchant_ids)
        self.channels = tuple(channels)
        self.pool = pool
        # None: the demo's fields (amount, hour, and channel when there are channels)
        self.request_fields = tuple(request_fields) if request_fields is not None else None
        self._rng = random.Random(seed)

    def row(self) -> dict[str, Any]:
        rng = self._rng
        if self.pool is not None:
            row = self.pool.draw(rng)
        else:
            row = {"user_id": rng.randint(*self.users), "merchant_id": rng.randint(*self.merchants)}
        fields = self.request_fields
        if fields is None:
            fields = (("amount", "float32"), ("hour", "int64"), ("channel", "string"))
        for name, dtype in fields:
            if name not in row:
                value = self._field(name, dtype)
                if value is not None:
                    row[name] = value
        return row

    def _field(self, name: str, dtype: str) -> Any:
        rng = self._rng
        if name == "amount" or (dtype == "float32" and name != "hour"):
            # the generator's amounts are lognormal around e^3.5 ≈ 33
            return round(rng.lognormvariate(3.5, 0.6), 2)
        if name == "hour" or dtype == "int64":
            return rng.randint(0, 23)
        if dtype == "bool":
            return rng.random() < 0.5
        # a string field (the demo's channel): no channels configured sends none
        vocabulary = self.channels if name == "channel" else DEFAULT_VOCABULARY
        return rng.choice(vocabulary) if vocabulary else None

    def body(self, rows: int) -> dict[str, Any]:
        return {"rows": [self.row() for _ in range(rows)]}


def _applied(repo: Path) -> bool:
    """Whether ``feast apply`` wrote the repository's registry (opening a store without one
    would create an empty one in the user's folder)."""
    import yaml

    try:
        registry = yaml.safe_load((repo / "feature_store.yaml").read_text()).get("registry")
    except (OSError, yaml.YAMLError, AttributeError):
        return False
    path = registry.get("path") if isinstance(registry, dict) else registry
    if not isinstance(path, str) or "://" in path:
        return isinstance(path, str)  # a remote registry: let Feast say
    return (repo / path).is_file()


def default_feature_repo(name: str) -> str:
    """The default ``--feature-repo`` as the Locust process must get it: absolute when this
    folder holds an applied repository (Locust runs in the report folder, where a relative
    ``feature_repo`` found nothing and the users fell back to id ranges, 0.8 % of them 404s),
    else as given (the ranges, as before)."""
    repo = Path(name).expanduser().absolute()
    return str(repo) if (repo / "feature_store.yaml").is_file() and _applied(repo) else name


def gateway_rows(options: LoadOptions, seed: int | str) -> EntityRows:
    """The gateway user's row source for ``options`` (the order in this module's docstring)."""
    from loadtests.settings import LoadOptions

    channels = parse_channels(options.channels)
    facts = serving_facts(options.repo_path, options.model, options.model_version)
    fields = facts.request_fields if facts is not None else None
    pool = None
    if options.entities:
        pool = entities_from_file(options.entities)
    elif facts is not None and options.feature_repo:
        repo = Path(options.feature_repo).expanduser().absolute()
        # The default folder may be a checkout's unapplied feature_repo/: then the ranges, as
        # before; a folder named on purpose that cannot give entities is an error.
        implicit = options.feature_repo == LoadOptions.feature_repo
        if (repo / "feature_store.yaml").is_file() and (_applied(repo) or not implicit):
            try:
                pool = online_entities(str(repo), facts.feature_service)
            except EntityError:
                if not implicit:
                    raise
        elif not implicit:
            raise EntityError(f"--feature-repo {repo} has no feature_store.yaml")
    return EntityRows(
        options.user_ids, options.merchant_ids, seed, channels, pool=pool, request_fields=fields
    )
