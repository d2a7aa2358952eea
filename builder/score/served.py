"""The version a batch scores: the same files Triton serves, from the model repository.

The model's folder, its ``config.pbtxt`` and one version folder: that version's ``model.onnx``
(checked against the sha256 its export recorded), its export identity (``metadata.json``'s
``identity``, which the config carries as ``builder.export_identity`` while it serves that
version) and its serving contract (the version's ``metadata.json``; for a generated model that
records none there, such as a fused ensemble, the config's parameters, when the config is that
export's). The version defaults to the one a gateway call gets: the champion a
``--keep-serving`` challenger sits beside, else the newest version the config loads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from builder.errors import RepositoryError, UsageError
from builder.repository.names import validate_model_name
from builder.repository.triton_config import ModelConfig, parse_pbtxt
from builder.repository.write import config_identity, loaded_versions, model_versions, read_metadata
from builder.score.errors import ScoreInputError
from serving_contract import ContractError, ServingContract, keys

ONNX_BACKENDS = ("onnxruntime", "onnxruntime_onnx")
SCORED_KINDS = ("binary", "multiclass", "regression", "outlier", "cluster")


@dataclass(frozen=True)
class ServedVersion:
    model: str
    version: int
    identity: str  # the export identity (metadata.json ``identity``)
    contract: ServingContract
    onnx: bytes  # model.onnx as it lies in the version folder
    onnx_sha256: str
    feature_service: str
    max_batch_size: int  # rows one Triton call may carry (0: any, the model has no batch axis)

    @property
    def label(self) -> str:
        return f"{self.model} v{self.version}"


def served_version(repo: Path, model: str, version: int | None = None) -> ServedVersion:
    """The version of ``model`` in ``repo`` to score (see the module docstring); RepositoryError
    when the model, the version or its files are not there, ScoreInputError when its contract
    cannot be scored from a feature service."""
    validate_model_name(model)
    if not repo.is_dir():
        raise UsageError(f"model repository {repo} is not a folder", hint="pass the --repo Triton serves")
    model_dir = repo / model
    config = _config(repo, model_dir)
    platform = config.platform or config.backend
    if platform not in ONNX_BACKENDS:
        raise RepositoryError(
            f"{model} is served by {platform!r}, not onnxruntime: builder score runs exported ONNX graphs",
            hint="score the model the ensemble runs (builder export's model, without _ensemble)"
            if platform == "ensemble"
            else "score a model builder export wrote as ONNX",
        )
    versions = model_versions(model_dir)
    chosen = _version(config, versions) if version is None else version
    if chosen not in versions:
        raise RepositoryError(
            f"{model} has no version {chosen} in {repo} (versions there: "
            f"{', '.join(map(str, versions)) or 'none'})",
            hint="score a version the repository holds (--version), or export that one again",
        )
    version_dir = model_dir / str(chosen)
    metadata = read_metadata(version_dir)
    if metadata is None or not metadata.get("identity"):
        raise RepositoryError(
            f"{model} v{chosen} has no readable metadata.json with its export identity",
            hint="export the version with builder export, which writes it",
        )
    identity = str(metadata["identity"])
    contract = _contract(model, chosen, config, metadata, identity)
    onnx_bytes, digest = _graph(version_dir, config, metadata, f"{model} v{chosen}")
    service = _service(model, contract)
    return ServedVersion(
        model, chosen, identity, contract, onnx_bytes, digest, service, config.max_batch_size
    )


def _config(repo: Path, model_dir: Path) -> ModelConfig:
    path = model_dir / "config.pbtxt"
    try:
        return parse_pbtxt(path.read_text())
    except FileNotFoundError:
        known = sorted(p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file())
        raise RepositoryError(
            f"no model {model_dir.name!r} in {repo} (models: {', '.join(known) or 'none'})",
            hint="name a model of the repository with --model",
        ) from None
    except Exception as exc:  # text_format's ParseError, a bad encoding
        raise RepositoryError(f"{path} cannot be read: {exc}", hint="run builder validate --repo") from exc


def _version(config: ModelConfig, versions: list[int]) -> int:
    pinned = config.parameters.get(keys.CHAMPION_VERSION)
    if pinned is not None and pinned.string_value.strip().isdigit():
        return int(pinned.string_value)
    served = loaded_versions(config, versions)
    if not served:
        return 0  # no version folder: refused by the caller, naming the folder's versions
    return served[-1]


def _contract(
    model: str, version: int, config: ModelConfig, metadata: dict, identity: str
) -> ServingContract:
    try:
        if metadata.get(keys.SERVING):
            contract = ServingContract.from_metadata(metadata)
        elif config_identity(config) == identity:
            contract = ServingContract.from_parameters(
                {k: v.string_value for k, v in config.parameters.items()}
            )
        else:
            raise RepositoryError(
                f"{model} v{version} records no serving contract, and the config describes another export",
                hint="score the version the config serves, or export this one again",
            )
    except ContractError as exc:
        raise RepositoryError(f"{model} v{version}: {exc}", hint="export it again") from exc
    if contract.legacy or contract.kind not in SCORED_KINDS:
        raise ScoreInputError(
            f"{model} v{version} is a {contract.kind or 'legacy (pre-kind)'} model; builder score reads "
            f"the answers of {', '.join(SCORED_KINDS)} models",
            hint="export it again with this builder, which records its kind",
        )
    if contract.layout == "tensors" or contract.input_columns is None:
        raise ScoreInputError(
            f"{model} v{version} takes tensors, not feature columns: there is nothing to join features into",
            hint="score a model exported from a tabular signature",
        )
    return contract


def _graph(version_dir: Path, config: ModelConfig, metadata: dict, label: str) -> tuple[bytes, str]:
    path = version_dir / (config.default_model_filename or "model.onnx")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RepositoryError(f"{label}: {path.name} cannot be read ({exc.strerror})") from exc
    digest = hashlib.sha256(data).hexdigest()
    recorded = (metadata.get("onnx") or {}).get("sha256")
    if recorded and recorded != digest:
        raise RepositoryError(
            f"{label}: {path.name} is not the file its export wrote (sha256 {digest[:12]}…, recorded "
            f"{str(recorded)[:12]}…)",
            hint="export the version again; builder validate --repo names what else changed",
        )
    return data, digest


def _service(model: str, contract: ServingContract) -> str:
    service = contract.feature_service
    if not service:
        raise ScoreInputError(
            f"{model} was exported without a Feast feature service ({keys.FEATURE_SERVICE})",
            hint="log the training run with the feast.* tags (feature service, entity keys, request "
            "fields), then export it again",
        )
    return service
