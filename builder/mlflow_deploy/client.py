"""``TritonStackDeploymentClient``: MLflow's deployment API over ``builder export`` and a Triton
server in explicit model-control mode. A deployment is a Triton model of the target's
repository; its versions are the registry versions exported into it.

* create: refuse a name the repository already holds; check Triton answers; export (conversion,
  parity, config, ensembles: nothing is written on a refusal); load every model written; wait ready.
* update: export the new model URI into the same name (a new version), reload.
* delete: unload (with the ensembles over it), then remove the model's folder, unless
  ``-C keep_files=true``; deleting a name that does not exist is not an error (MLflow's rule).
* list / get: the repository index (names, versions, states); get adds the serving contract.
* predict: inputs → Triton tensors by the served contract → ``PredictionsResponse``.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ParamSpec, TypeVar

from mlflow.deployments import BaseDeploymentClient, PredictionsResponse

from builder.errors import BuilderError, RepositoryError, UsageError
from builder.export.run import export_model
from builder.mlflow_deploy import payload
from builder.mlflow_deploy.errors import DeploymentExists, DeploymentNotFound, to_mlflow
from builder.mlflow_deploy.target import (
    Target,
    check_flavor,
    check_keys,
    export_request,
    flag,
    number,
    parse_target,
)
from builder.mlflow_deploy.triton import Triton
from builder.repository.names import validate_model_name
from serving_contract import serving_parameters

P = ParamSpec("P")
R = TypeVar("R")


def refusals_as_mlflow(fn: Callable[P, R]) -> Callable[P, R]:
    """Each builder refusal leaves the plugin as one ``MlflowException`` line."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except BuilderError as exc:
            raise to_mlflow(exc) from None

    return wrapper


class TritonStackDeploymentClient(BaseDeploymentClient):
    """Deploys MLflow registry models to a Triton model repository and the server on it.

    ``target_uri``: ``triton-stack:/path/to/model_repo?triton=http://127.0.0.1:8000`` (see
    ``mlflow deployments help -t triton-stack``)."""

    def __init__(self, target_uri: str) -> None:
        super().__init__(target_uri)
        try:
            parse_target(target_uri)  # a malformed target fails here, once; config may add to it
        except BuilderError as exc:
            raise to_mlflow(exc) from None

    @contextlib.contextmanager
    def _triton(self, config: Mapping[str, Any] | None = None) -> Iterator[tuple[Target, Triton]]:
        config = config or {}
        target = parse_target(self.target_uri, config)
        triton = Triton(target, timeout=number(config, "timeout", 120.0))
        try:
            yield target, triton
        finally:
            triton.close()

    @refusals_as_mlflow
    def create_deployment(
        self, name: str, model_uri: str, flavor: str | None = None, config: Any = None, endpoint: Any = None
    ) -> dict[str, Any]:
        """Export ``model_uri`` as Triton model ``name`` and load it; blocks until it is ready."""
        check_flavor(flavor)
        name = validate_model_name(name, what="deployment name")
        with self._triton(config) as (target, triton):
            if (target.repo / name).exists():
                raise DeploymentExists(
                    f"deployment {name!r} exists in {target.repo}",
                    hint="use update_deployment (`mlflow deployments update`) for a new version",
                )
            return _export_and_load(name, model_uri, config or {}, target, triton)

    @refusals_as_mlflow
    def update_deployment(
        self,
        name: str,
        model_uri: str | None = None,
        flavor: str | None = None,
        config: Any = None,
        endpoint: Any = None,
    ) -> dict[str, Any]:
        """Export ``model_uri`` into ``name`` as a new version and reload it."""
        check_flavor(flavor)
        name = validate_model_name(name, what="deployment name")
        if not model_uri:
            raise UsageError("update needs the model URI to deploy", hint="pass -m models:/NAME@ALIAS")
        with self._triton(config) as (target, triton):
            if not (target.repo / name).is_dir():
                raise DeploymentNotFound(
                    f"no deployment {name!r} in {target.repo}",
                    hint="create it first (`mlflow deployments create`)",
                )
            return _export_and_load(name, model_uri, config or {}, target, triton)

    @refusals_as_mlflow
    def delete_deployment(self, name: str, config: Any = None, endpoint: Any = None) -> None:
        """Unload ``name``; remove its folder from the repository unless ``keep_files=true``."""
        config = config or {}
        check_keys(config, ("timeout", "keep_files"))
        name = validate_model_name(name, what="deployment name")
        with self._triton(config) as (target, triton):
            if any(m.get("name") == name for m in triton.index()):
                triton.unload(name)
            folder = target.repo / name
            if folder.is_dir() and not flag(config, "keep_files", False):
                shutil.rmtree(folder)

    @refusals_as_mlflow
    def list_deployments(self, endpoint: Any = None) -> list[dict[str, Any]]:
        """Every model of the repository index: name, state, versions (with their states)."""
        with self._triton() as (_, triton):
            return _grouped(triton.index())

    @refusals_as_mlflow
    def get_deployment(self, name: str, endpoint: Any = None) -> dict[str, Any]:
        """One deployment as ``list_deployments`` shows it, with its serving contract when loaded."""
        with self._triton() as (target, triton):
            found = [d for d in _grouped(triton.index()) if d["name"] == name]
            if not found:
                raise DeploymentNotFound(
                    f"no deployment {name!r} on Triton at {triton.url}",
                    hint="`mlflow deployments list -t …` names the deployments",
                )
            deployment = {**found[0], "repo": str(target.repo), "triton_url": f"http://{triton.url}"}
            if triton.ready(name):
                params = payload.parameters(triton.config(name))
                deployment["serving"] = serving_parameters(params)
            return deployment

    @refusals_as_mlflow
    def predict(
        self, deployment_name: Any = None, inputs: Any = None, endpoint: Any = None
    ) -> PredictionsResponse:
        """Predictions of the deployment's served version on ``inputs`` (a DataFrame, an array,
        or MLflow's serving-format dict): ``{"predictions": {output: [row, ...]}, "model_name",
        "model_version"}``."""
        if not deployment_name:
            raise UsageError("predict needs the deployment name", hint="pass --name")
        with self._triton() as (_, triton):
            config = triton.config(str(deployment_name))
            tensors = payload.triton_inputs(payload.as_data(inputs), config)
            outputs = [o["name"] for o in config.get("output") or []]
            chunks = [
                triton.infer(str(deployment_name), chunk, outputs)
                for chunk in payload.batches(tensors, int(config.get("max_batch_size", 0)))
            ]
            version = max(
                (int(v["version"]) for v in _versions(triton.index(), str(deployment_name))), default=None
            )
        return PredictionsResponse(
            {
                "predictions": payload.predictions(chunks),
                "model_name": str(deployment_name),
                "model_version": version,
            }
        )


def _check_served(target: Target, triton: Triton) -> None:
    """The repository folder exists and is the one the target Triton serves (its models are
    in Triton's repository index), so an export never lands where nothing loads it: a typed
    placeholder (``/abs/path/model_repo``) once created that folder at the root and wrote
    into it."""
    if not target.repo.is_dir():
        raise RepositoryError(
            f"model repository {target.repo} does not exist",
            hint="name the folder the target Triton serves (builder serve --repo DIR "
            "--model-control-mode explicit), e.g. triton-stack:$PWD/model_repo",
        )
    served = {str(m.get("name")) for m in triton.index()}
    here = {p.name for p in target.repo.iterdir() if p.is_dir() and not p.name.startswith(".")}
    if (served or here) and not served & here:
        theirs = ", ".join(sorted(served)[:5]) or "no models"
        raise RepositoryError(
            f"Triton at {triton.url} does not serve {target.repo}: its repository has {theirs}",
            hint="point the target at the folder Triton was started on (or start Triton on this one)",
        )


def _export_and_load(
    name: str, model_uri: str, config: Mapping[str, Any], target: Target, triton: Triton
) -> dict[str, Any]:
    triton.check_live()  # before the export: a refusal leaves the repository unchanged
    _check_served(target, triton)
    request = export_request(model_uri, name, target.repo, config)
    result = export_model(request)
    loaded = [w.name for w in result.written]
    # the model first, its ensemble (which loads the steps it names) after
    for model in sorted(dict.fromkeys(loaded), key=lambda m: m.endswith("_ensemble")):
        triton.load(model)
    return {
        "name": name,
        "flavor": "onnx",  # what Triton serves; `mlflow deployments create|update` print it
        "model_uri": model_uri,
        "version": result.version,
        "models": loaded,
        "parity": result.parity.to_dict(),
        "warnings": list(result.warnings),
        "repo": str(target.repo),
        "triton_url": f"http://{triton.url}",
    }


def _versions(index: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [m for m in index if m.get("name") == name and str(m.get("version", "")).isdigit()]


def _grouped(index: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The index (one entry per model version, or per model never loaded) by model name."""
    names = list(dict.fromkeys(str(m.get("name")) for m in index))
    deployments = []
    for name in names:
        versions = [
            {"version": int(m["version"]), "state": m.get("state", ""), "reason": m.get("reason", "")}
            for m in _versions(index, name)
        ]
        ready = any(v["state"] == "READY" for v in versions)
        states = [str(m.get("state") or "") for m in index if m.get("name") == name]
        deployments.append(
            {
                "name": name,
                "state": "READY" if ready else next((s for s in states if s), "UNAVAILABLE"),
                "versions": versions,
            }
        )
    return deployments
