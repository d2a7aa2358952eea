"""``builder validate``: a model's explainer must explain the version Triton serves.

The model's serving contract names its explainer (its ``explainer`` fact); the explainer's
config records the model, version and export identity it was built for (``keys.EXPLAINS``).
A mismatch is what a re-export without ``--explain`` (the old explainer left beside a new
version) or a hand copy leaves, and the reason codes would then explain another model.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from builder.repository.write import config_identity, loaded_versions
from serving_contract import ContractError, ServingContract, keys

if TYPE_CHECKING:
    from builder.repository.validate import ModelEntry

# An ``--ensemble`` export serves the model as ``<model>_ensemble`` (builder/ensemble/), whose
# contract names the model's explainer: the gateway reads the contract of what it calls.
_ENSEMBLE_SUFFIX = "_ensemble"
_HINT = "re-export the model with --explain (or without it, and remove the old explainer)"


def check_explainers(entries: dict[str, ModelEntry], problems: list[str]) -> None:
    """Every explainer a contract names exists, and every explainer in the repository was
    built for the version its model serves now (and is the one that model's contract names)."""
    named: dict[str, set[str]] = {}  # explainer -> the models whose contracts name it
    for entry in entries.values():
        params = {k: v.string_value for k, v in entry.config.parameters.items()}
        if keys.parameter(keys.EXPLAINER) not in params:
            continue
        try:
            explainer = ServingContract.from_parameters(params, check=False).explainer
        except ContractError as exc:
            problems.append(f"{entry.name}: {exc}")
            continue
        assert explainer is not None  # the parameter is there
        named.setdefault(explainer.model, set()).add(entry.name)
        if explainer.model not in entries:
            problems.append(
                f"{entry.name}: its explainer {explainer.model!r} is not in the repository ({_HINT})"
            )
    for target in entries.values():
        raw = target.config.parameters.get(keys.EXPLAINS)
        if raw is None:
            continue
        _check_explainer(target, raw.string_value, entries, named, problems)


def _check_explainer(
    target: ModelEntry,
    raw: str,
    entries: dict[str, ModelEntry],
    named: dict[str, set[str]],
    problems: list[str],
) -> None:
    try:
        explains = json.loads(raw)
    except json.JSONDecodeError:
        explains = None
    if not isinstance(explains, dict):
        problems.append(
            f"{target.name}: {keys.EXPLAINS} is not a JSON object: which model it explains is unknown"
        )
        return
    model, version = explains.get(keys.EXPLAINS_MODEL), explains.get(keys.EXPLAINS_VERSION)
    entry = entries.get(str(model))
    if entry is None:
        problems.append(f"{target.name}: explains {model!r}, which is not in the repository ({_HINT})")
        return
    served = loaded_versions(entry.config, entry.versions)
    now = served[-1] if served else None
    if version != now:
        problems.append(
            f"{target.name}: explains {model} version {version}, but {model} serves version "
            f"{now if now is not None else 'none'} ({_HINT})"
        )
    elif not named.get(target.name, set()) & {model, f"{model}{_ENSEMBLE_SUFFIX}"}:
        problems.append(
            f"{target.name}: {model}'s serving contract does not name it as its explainer ({_HINT})"
        )
    elif explains.get(keys.EXPLAINS_IDENTITY) != config_identity(entry.config):
        problems.append(
            f"{target.name}: was built for another export of {model} version {version} "
            f"(a different export identity) ({_HINT})"
        )
