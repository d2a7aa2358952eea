"""Standard-mode (KServe >= 0.20) canary patches: ``spec.canary`` entries (pure data).

``spec.canary`` is an atomic list (a merge patch replaces it whole), so every patch here is
built from the live object and keeps canaries someone else added. The release's own canary is
named after the model version (``v<version>``, a DNS label): KServe runs it as Deployment and
Service ``<isvc>-<name>-predictor``, and that name is how promote and rollback find it again.

- canary: ``spec.canary += {trafficPercent, predictor: {name, model}}``; the predictor is laid
  over the stable one by KServe, so runtime and resources stay the stable predictor's.
- full rollout (no ``--canary-percent``): a rolling update of the stable predictor's
  ``storageUri``; a leftover canary of this release is dropped.
- promote: ``spec.predictor`` takes the canary's ``name`` and model, the entry is dropped --
  KServe retargets the stable predictor to the canary's Deployment, no restart.
- rollback: the entry is dropped; KServe deletes its Deployment, the stable one takes it all.
"""

from __future__ import annotations

import copy
from typing import Any

from builder.errors import UsageError
from builder.release.api import MODEL_VERSION_ANNOTATION, canary_name
from builder.release.errors import ReleaseError
from builder.release.manifest import ServiceSpec, model_block, release_annotations


def canaries(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(((obj or {}).get("spec") or {}).get("canary") or [])


def entry_name(entry: dict[str, Any]) -> str | None:
    return (entry.get("predictor") or {}).get("name")


# The canary's model is a container spec whose ``name`` the CRD requires there (and only
# there); KServe's own name for the model server container.
CONTAINER = "kserve-container"


def canary_entry(spec: ServiceSpec) -> dict[str, Any]:
    """This release's ``spec.canary`` entry; replicas are left to KServe (sized by the percent)."""
    return {
        "trafficPercent": spec.canary_percent,
        "predictor": {
            "name": canary_name(spec.model_version),
            "model": {"name": CONTAINER, **model_block(spec)},
        },
    }


def _others(live: dict[str, Any] | None, name: str) -> list[dict[str, Any]]:
    return [c for c in canaries(live) if entry_name(c) != name]


def canary_patch(spec: ServiceSpec, live: dict[str, Any] | None) -> dict[str, Any]:
    """Add (or replace) this release's canary, keeping the others of ``live``."""
    spec.check()
    name = canary_name(spec.model_version)
    stable = ((live or {}).get("spec") or {}).get("predictor") or {}
    if stable.get("name") == name:
        raise UsageError(
            f"version {spec.model_version} is already the stable predictor ({name!r})",
            hint="nothing to canary: release another version, or omit --canary-percent",
        )
    others = _others(live, name)
    total = sum(int(c.get("trafficPercent") or 0) for c in others) + int(spec.canary_percent or 0)
    if total > 100:
        listed = ", ".join(f"{entry_name(c)} {c.get('trafficPercent')}%" for c in others)
        raise UsageError(
            f"canaries would take {total}% of traffic (other canaries: {listed})",
            hint="KServe allows at most 100% in all; lower --canary-percent or roll the others back",
        )
    return {"metadata": release_annotations(spec), "spec": {"canary": [*others, canary_entry(spec)]}}


def full_patch(spec: ServiceSpec, live: dict[str, Any] | None) -> dict[str, Any]:
    """A rolling update of the stable predictor to this version (works on any KServe)."""
    spec.check()
    body: dict[str, Any] = {"predictor": {"model": {"storageUri": spec.storage_uri}}}
    name = canary_name(spec.model_version)
    if any(entry_name(c) == name for c in canaries(live)):
        body["canary"] = _others(live, name) or None
    return {"metadata": release_annotations(spec), "spec": body}


def our_canary(live: dict[str, Any]) -> dict[str, Any]:
    """The release's canary on ``live``: the one named after its model-version annotation, else
    the only one there is."""
    entries = canaries(live)
    version = ((live.get("metadata") or {}).get("annotations") or {}).get(MODEL_VERSION_ANNOTATION)
    named = [c for c in entries if version is not None and entry_name(c) == canary_name(version)]
    if named:
        return named[0]
    if len(entries) == 1:
        return entries[0]
    name = live.get("metadata", {}).get("name")
    if not entries:
        raise ReleaseError(
            f"InferenceService {name} has no canary (spec.canary is empty)",
            hint="start one with `builder release apply ... --canary-percent N`",
        )
    raise ReleaseError(
        f"InferenceService {name} has {len(entries)} canaries "
        f"({', '.join(str(entry_name(c)) for c in entries)}) and none is version {version}'s",
        hint="promote or roll back with kubectl, naming the canary",
    )


def promote_patch(live: dict[str, Any]) -> dict[str, Any]:
    """The stable predictor becomes the canary (name and model); the entry goes."""
    ours = our_canary(live)
    rest = _others(live, str(entry_name(ours)))
    return {"spec": {"predictor": copy.deepcopy(ours["predictor"]), "canary": rest or None}}


def rollback_patch(live: dict[str, Any]) -> dict[str, Any]:
    """Drop the release's canary (null removes the list when it was the only one)."""
    ours = our_canary(live)
    return {"spec": {"canary": _others(live, str(entry_name(ours))) or None}}
