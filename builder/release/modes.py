"""KServe's two deployment modes a canary can run in, and which one an InferenceService uses.

- **Serverless** (Knative): every predictor change is a revision; ``spec.predictor.
  canaryTrafficPercent`` splits traffic between the newest revision and the last one rolled out
  at 100 %. Promote removes the field, rollback sets it to 0. Any KServe version.
- **Standard** (called ``RawDeployment`` before KServe 0.16; plain Deployments): KServe >= 0.20
  runs canaries through ``spec.canary``, a list of ``{trafficPercent, predictor}`` whose
  predictor (``name`` required) is laid over the stable one and gets its own Deployment and
  Service ``<isvc>-<name>-predictor``. Promote points ``spec.predictor`` at the canary (its
  ``name`` and model) and drops the entry: KServe keeps the canary's pods, no restart.
  Rollback drops the entry. Before 0.20 ``canaryTrafficPercent`` was silently ignored in this
  mode and ``spec.canary`` does not exist: the API server would prune it, so a canary there is
  refused (exit 12), from the CRD before anything is sent and from the API server's own
  server-side dry run before anything changes.

The mode comes from ``--mode`` or, with ``auto``, from the live object: its
``serving.kserve.io/deploymentMode`` annotation, else the ``status.deploymentMode`` the
controller reports. A new InferenceService is created Serverless unless told otherwise.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from builder.errors import UsageError
from builder.release.api import DEPLOYMENT_MODE
from builder.release.errors import ManifestError


class Mode(enum.StrEnum):
    AUTO = "auto"
    SERVERLESS = "serverless"
    STANDARD = "standard"

    @property
    def annotation(self) -> str:
        """The annotation value KServe 0.20 reads (``RawDeployment`` is its legacy alias)."""
        return "Standard" if self is Mode.STANDARD else "Serverless"


# What KServe writes or accepts in the annotation and in status.deploymentMode, lower-cased.
_KNOWN = {"serverless": Mode.SERVERLESS, "standard": Mode.STANDARD, "rawdeployment": Mode.STANDARD}


def mode_of(obj: dict[str, Any]) -> Mode | None:
    """The mode a live InferenceService runs in, or None when neither annotation nor status says."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    for value in (annotations.get(DEPLOYMENT_MODE), (obj.get("status") or {}).get("deploymentMode")):
        if not value:
            continue
        mode = _KNOWN.get(str(value).lower())
        if mode is None:
            raise UsageError(
                f"InferenceService {obj.get('metadata', {}).get('name')!r} runs in deployment mode "
                f"{value!r}: builder release supports Serverless and Standard (RawDeployment)"
            )
        return mode
    return None


def resolve(requested: Mode, live: dict[str, Any] | None) -> Mode:
    """The mode to act in: the live object's, which ``--mode`` may only confirm."""
    if live is None:
        return Mode.SERVERLESS if requested is Mode.AUTO else requested
    found = mode_of(live)
    name = live.get("metadata", {}).get("name")
    if found is None:
        if requested is Mode.AUTO:
            raise UsageError(
                f"cannot tell the deployment mode of InferenceService {name!r}: no {DEPLOYMENT_MODE} "
                "annotation and no status.deploymentMode",
                hint="pass --mode serverless or --mode standard (the cluster's default mode)",
            )
        return requested
    if requested not in (Mode.AUTO, found):
        raise UsageError(
            f"InferenceService {name!r} runs in {found.annotation} mode, not {requested.annotation}",
            hint="KServe cannot switch an existing InferenceService's mode; use --mode auto",
        )
    return found


def canary_field_missing(what: str) -> ManifestError:
    """The error for a Standard-mode canary where KServe has no ``spec.canary`` (< 0.20)."""
    return ManifestError(
        f"{what} has no spec.canary: Standard-mode canaries need KServe >= 0.20 "
        "(before it, canaryTrafficPercent is silently ignored in Standard mode)",
        ["/spec/canary: not in the InferenceService CRD"],
        hint="upgrade KServe, release without --canary-percent (a rolling update), or use a "
        "Serverless InferenceService",
    )


def require_canary_crd(crd_path: Path | None) -> None:
    """Raise ``canary_field_missing`` when the CRD at ``crd_path`` predates ``spec.canary``."""
    if crd_path is None:
        return
    from builder.release.schema import load_schema

    spec = load_schema(crd_path).get("properties", {}).get("spec", {})
    if "canary" not in spec.get("properties", {}):
        raise canary_field_missing(f"KServe's CRD {crd_path}")
