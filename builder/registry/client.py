"""Fetching a model from an MLflow registry (or a run) into a local folder.

MLflow is configured the standard way, ``MLFLOW_TRACKING_URI`` / ``MLFLOW_REGISTRY_URI``; with
neither set, the builder uses a SQLite registry ``mlflow.db`` in the current directory (what
``mlflow ui`` and ``mlflow server`` use by default), never a silent file store.

Loading a model executes what its flavor's loader runs (scikit-learn models through skops with
the trust list recorded in the model, PyTorch through pickle): point the builder only at
registries you trust.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import RegistryError
from builder.registry.uri import ModelURI

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"

# Flavors the builder converts, most specific first: an XGBoost model is also a pyfunc.
SUPPORTED_FLAVORS = ("onnx", "pytorch", "keras", "tensorflow", "xgboost", "lightgbm", "catboost", "sklearn")


@dataclass(frozen=True)
class RegistryModel:
    """A model resolved and downloaded, with what the export needs to know about it."""

    uri: ModelURI
    registered_name: str | None
    version: int | None
    run_id: str
    local_path: Path
    flavor: str
    mlmodel: Any  # mlflow.models.Model
    run_params: dict[str, str] = field(default_factory=dict)
    run_tags: dict[str, str] = field(default_factory=dict)
    version_tags: dict[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        """How messages name this model."""
        if self.registered_name is not None:
            return f"{self.registered_name} version {self.version}"
        return self.uri.raw


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def _client() -> Any:
    import mlflow
    from mlflow import MlflowClient

    # MLflow's download progress bars are noise in a CLI that prints its own progress.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    uri = tracking_uri()
    registry = os.environ.get("MLFLOW_REGISTRY_URI") or uri
    for store in dict.fromkeys((uri, registry)):
        require_sqlite_file(store)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=registry)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (``sqlite:///rel.db`` is relative to the
    current directory, ``sqlite:////abs.db`` absolute); None for other stores and in-memory ones."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return Path(path)


def require_sqlite_file(uri: str) -> None:
    """Refuse a SQLite registry whose file does not exist: MLflow would create an empty one
    (and its tables) in its place, and the export would then fail on a model that was never
    there, leaving a stray ``mlflow.db`` behind."""
    path = sqlite_path(uri)
    if path is None or path.is_file():
        return
    raise RegistryError(
        f"no MLflow registry at {uri} (the file {path.absolute()} does not exist)",
        hint="set MLFLOW_TRACKING_URI to your registry (e.g. sqlite:////abs/path/mlflow.db or "
        "http://HOST:5000), or run from the directory that holds mlflow.db",
    )


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "error_code", "") in {"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"}


def fetch_model(uri: ModelURI, dst: Path) -> RegistryModel:
    """Resolve ``uri`` in the registry and download its artifacts into ``dst``."""
    from mlflow.exceptions import MlflowException

    client = _client()
    try:
        if uri.is_registry:
            assert uri.name is not None
            mv = _resolve_version(client, uri)
            run_id, source, version = mv.run_id, f"models:/{uri.name}/{mv.version}", int(mv.version)
            version_tags = dict(mv.tags or {})
        else:
            run_id, source, version, version_tags = uri.run_id, uri.raw, None, {}
        run = client.get_run(run_id) if run_id else None
    except MlflowException as exc:
        raise RegistryError(
            f"registry at {tracking_uri()} cannot resolve {uri.raw}: {exc.message}",
            hint="check MLFLOW_TRACKING_URI and the run id",
        ) from exc
    local = _download(source, dst, uri)
    mlmodel = _load_mlmodel(local, uri)
    return RegistryModel(
        uri=uri,
        registered_name=uri.name,
        version=version,
        run_id=run_id or mlmodel.run_id or "",
        local_path=local,
        flavor=_pick_flavor(mlmodel, uri),
        mlmodel=mlmodel,
        run_params=dict(run.data.params) if run else {},
        run_tags=dict(run.data.tags) if run else {},
        version_tags=version_tags,
    )


def _resolve_version(client: Any, uri: ModelURI) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(uri.name)
    except MlflowException as exc:
        if _not_found(exc):
            raise RegistryError(
                f"no registered model named {uri.name!r} in {tracking_uri()}",
                hint=f"list the registered models in the MLflow UI (`mlflow ui --backend-store-uri "
                f"{tracking_uri()}`) or with MlflowClient().search_registered_models(); or set "
                "MLFLOW_TRACKING_URI to the registry that holds it",
            ) from exc
        raise
    aliases = dict(getattr(model, "aliases", {}) or {})
    if uri.alias is not None:
        if uri.alias not in aliases:
            known = ", ".join(sorted(aliases)) or "none"
            raise RegistryError(
                f"registered model {uri.name!r} has no alias {uri.alias!r} (aliases: {known})",
                hint=_alias_hint(str(uri.name), uri.alias, sorted(aliases)),
            )
        return client.get_model_version(uri.name, str(aliases[uri.alias]))
    try:
        return client.get_model_version(uri.name, str(uri.version))
    except MlflowException as exc:
        if _not_found(exc):
            raise RegistryError(
                f"registered model {uri.name!r} has no version {uri.version}",
                hint=f"latest versions: {_versions(client, uri.name)}",
            ) from exc
        raise


def _versions(client: Any, name: str | None) -> str:
    versions = sorted(int(v.version) for v in client.search_model_versions(f"name='{name}'"))
    return ", ".join(map(str, versions[-5:])) or "none"


def _download(source: str, dst: Path, uri: ModelURI) -> Path:
    import mlflow
    from mlflow.exceptions import MlflowException

    dst.mkdir(parents=True, exist_ok=True)
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(dst)))
    except (MlflowException, OSError) as exc:
        raise RegistryError(
            f"cannot download the artifacts of {uri.raw}: {exc}",
            hint="check that the artifact store the registry points at is reachable",
        ) from exc


def _load_mlmodel(local: Path, uri: ModelURI) -> Any:
    from mlflow.models import Model

    if not (local / "MLmodel").is_file():
        raise RegistryError(
            f"{uri.raw} is not an MLflow model (no MLmodel file in its artifacts)",
            hint="point runs:/RUN_ID/PATH at the folder given to log_model(name=...)",
        )
    try:
        return Model.load(str(local))
    except Exception as exc:  # a corrupted MLmodel can raise anything yaml/mlflow throws
        raise RegistryError(f"{uri.raw}: its MLmodel file cannot be read: {exc}") from exc


def _pick_flavor(mlmodel: Any, uri: ModelURI) -> str:
    flavors = set(mlmodel.flavors)
    for flavor in SUPPORTED_FLAVORS:
        if flavor in flavors:
            return flavor
    from builder.errors import ConversionError

    logged = ", ".join(sorted(flavors - {"python_function"})) or "python_function only"
    raise ConversionError(
        f"{uri.raw} has flavor(s) {logged}; the builder converts {', '.join(SUPPORTED_FLAVORS)}",
        hint="log the model with one of those flavors, or convert it to ONNX and log it with "
        "mlflow.onnx.log_model",
    )


def _alias_hint(name: str, alias: str, aliases: list[str]) -> str:
    """A typo gets the alias it was meant to be, not an offer to create the misspelt one."""
    import difflib

    close = difflib.get_close_matches(alias, aliases, n=1, cutoff=0.6)
    if close:
        return f"did you mean models:/{name}@{close[0]}?"
    if aliases:
        return "use one of its aliases: " + ", ".join(f"models:/{name}@{a}" for a in aliases)
    return (
        f"give a version (models:/{name}/1) or set an alias: "
        f"MlflowClient().set_registered_model_alias({name!r}, {alias!r}, VERSION)"
    )
