"""``builder export --keep-serving``: a challenger version loaded beside the champion.

The gateway shadows a *challenger* (the version this export writes) on live traffic while the
*champion* (the newest version the model's config on disk loads now) still answers. Triton
sends a request that names no version to the highest loaded version, which is the challenger,
so the config records the champion (parameter ``serving.champion_version``) and the gateway
names it on every call.

Triton has one config per model, shared by both versions. So the challenger must keep the
champion's serving contract (everything the gateway reads: the config parameters but the drift
reference and the export's identity, the inputs, outputs and max_batch_size); a model whose
contract changes is exported under its own name and shadowed as another model. The drift
reference stays the champion's: the champion serves, so drift is measured against it. A later
plain export of the challenger (the same version, or a newer one) writes the config the usual
way, without ``serving.champion_version``, and the challenger serves alone: the promotion.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from builder.errors import RepositoryError, UsageError
from builder.repository.triton_config import ModelConfig, parse_pbtxt
from builder.repository.write import ModelArtifact, loaded_versions, model_versions
from serving_contract import keys

CHAMPION_PARAMETER = keys.CHAMPION_VERSION
DRIFT_PARAMETER = keys.DRIFT_REFERENCE
# Parameters that may differ between the champion's config and the challenger's: which export
# wrote it, the drift reference (the champion's is kept) and the champion itself.
NOT_CONTRACT = keys.VERSION_PARAMETERS


@dataclasses.dataclass(frozen=True)
class Serving:
    """What serves a model now: its config on disk and the versions that config loads."""

    config: ModelConfig
    loaded: tuple[int, ...]


def serving_now(repo: Path, name: str, version: int | None = None) -> Serving:
    """The model's config on disk and the versions it loads now, without ``version`` (the one
    being written, which an earlier --keep-serving export may have loaded already); refused
    when nothing else serves: --keep-serving needs a champion."""
    model_dir = repo / name
    config = _read_config(model_dir / "config.pbtxt")
    loaded = loaded_versions(config, model_versions(model_dir)) if config is not None else []
    others = [v for v in loaded if v != version]
    if not others:
        if config is None:
            now = f"{name} has no model in {repo}"
        elif loaded:
            now = f"{name} serves only version {loaded[-1]} in {repo}, the one this export writes"
        else:
            now = f"{name} serves no version in {repo}"
        raise UsageError(
            f"--keep-serving keeps the serving version beside the new one, but {now}",
            hint="export without --keep-serving: with nothing else serving, the new version serves alone",
        )
    return Serving(config, tuple(others))


def keep_serving(repo: Path, version: int, art: ModelArtifact) -> tuple[ModelArtifact, int]:
    """``art`` (the export's artifact of version ``version``) with a config that loads the
    champion beside it; returns it and the champion. Refused, before anything is written, when
    the champion is not older or the serving contracts differ."""
    now = serving_now(repo, art.name, version)
    champion = _champion(now)
    if champion > version:
        raise RepositoryError(
            f"{art.name} version {version} cannot be a challenger to version {champion}, which is "
            "newer: Triton sends requests that name no version to the highest version it loads",
            hint="register the challenger as a newer registry version than the one serving",
        )
    differs = contract_differences(now.config, art.config)
    if differs:
        raise RepositoryError(
            f"{art.name} version {version} cannot serve beside version {champion}: its serving "
            f"contract differs in {', '.join(differs)}, and both versions share one config",
            hint=f"export the challenger under its own name (--name {art.name}_challenger) and "
            "shadow that model instead",
        )
    config = ModelConfig()
    config.CopyFrom(art.config)
    config.version_policy.Clear()
    config.version_policy.specific.versions.extend([champion, version])
    config.parameters[CHAMPION_PARAMETER].string_value = str(champion)
    if DRIFT_PARAMETER in now.config.parameters:
        config.parameters[DRIFT_PARAMETER].CopyFrom(now.config.parameters[DRIFT_PARAMETER])
    elif DRIFT_PARAMETER in config.parameters:
        del config.parameters[DRIFT_PARAMETER]
    return dataclasses.replace(art, config=config), champion


def _champion(now: Serving) -> int:
    """The newest version the config loads; but where that config is a --keep-serving one, the
    champion it records (a new challenger replaces the old one, the champion still answers)."""
    param = now.config.parameters.get(CHAMPION_PARAMETER)
    recorded = param.string_value if param is not None else ""
    if recorded.isdigit() and int(recorded) in now.loaded:
        return int(recorded)
    return now.loaded[-1]


def contract_differences(old: ModelConfig, new: ModelConfig) -> list[str]:
    """What the gateway reads that differs between two configs, each named as a user would
    look it up (``parameter serving.classes``, ``inputs``, ``max_batch_size``), sorted."""
    differs = []
    old_params, new_params = _parameters(old), _parameters(new)
    for key in sorted(set(old_params) | set(new_params)):
        if old_params.get(key) != new_params.get(key):
            differs.append(f"parameter {key}")
    for what in ("input", "output"):
        if _tensors(getattr(old, what)) != _tensors(getattr(new, what)):
            differs.append(f"{what}s")
    if old.max_batch_size != new.max_batch_size:
        differs.append(f"max_batch_size ({old.max_batch_size} -> {new.max_batch_size})")
    return differs


def _parameters(config: ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items() if k not in NOT_CONTRACT}


def _tensors(tensors: Any) -> list[tuple[str, int, tuple[int, ...]]]:
    return sorted((t.name, t.data_type, tuple(t.dims)) for t in tensors)


def _read_config(path: Path) -> ModelConfig | None:
    try:
        return parse_pbtxt(path.read_text())
    except (OSError, UnicodeDecodeError, text_format.ParseError):
        return None
