"""The InferenceService of a model version, and the Serverless patches that move its traffic.

Rendered to match the Helm chart's InferenceService (``helm/triton-stack``): model format
``triton``, Serverless mode by default (tag routing on, so the newest revision is reachable at
its ``latest-`` host) or Standard mode (``--mode standard``; its canary patches are in
``standard``, the modes themselves in ``modes``). An existing InferenceService, Helm-installed
or not, is changed only where a release must change it: the model's ``storageUri``, the canary
and the release annotations; resources, runtime and probes stay whoever set them.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from builder.errors import UsageError
from builder.release.api import (
    API_VERSION,
    DEPLOYMENT_MODE,
    KIND,
    MODEL_ANNOTATION,
    MODEL_VERSION_ANNOTATION,
    TAG_ROUTING,
    canary_name,
)
from builder.release.modes import Mode

PROTOCOLS = ("v2", "grpc-v2")

# KServe derives "<name>-predictor-00001" and longer names from it; they must fit in 63 chars.
_MAX_NAME = 45
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_URI = re.compile(r"^[a-z][a-z0-9+.-]*://.+")


@dataclass(frozen=True)
class ServiceSpec:
    """What a release of one model version needs on KServe."""

    name: str
    namespace: str
    model: str
    model_version: str
    storage_uri: str
    canary_percent: int | None = None
    runtime: str | None = None  # a ServingRuntime's name; None lets KServe pick by model format
    runtime_version: str | None = None  # the runtime image tag, e.g. 24.10-py3
    protocol: str = "v2"
    min_replicas: int = 1
    max_replicas: int = 3
    gpus: int = 0
    mode: Mode = Mode.AUTO  # AUTO: the live object's mode; Serverless for a new one

    def check(self) -> ServiceSpec:
        """Raise UsageError on what the API server or KServe would reject later, or worse, accept."""
        if not _DNS_LABEL.match(self.name) or len(self.name) > _MAX_NAME:
            raise UsageError(
                f"InferenceService name {self.name!r} is not a DNS label of at most {_MAX_NAME} characters",
                hint="lower-case letters, digits and '-' (KServe appends '-predictor-00001' and more)",
            )
        if not _DNS_LABEL.match(self.namespace):
            raise UsageError(f"namespace {self.namespace!r} is not a DNS label")
        if not _URI.match(self.storage_uri):
            raise UsageError(
                f"storage URI {self.storage_uri!r} has no scheme",
                hint="e.g. s3://bucket/model_repo, gs://..., pvc://claim/path",
            )
        if self.canary_percent is not None and not 0 <= self.canary_percent <= 100:
            raise UsageError(f"canary percent must be 0..100, got {self.canary_percent}")
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"protocol {self.protocol!r}: use one of {', '.join(PROTOCOLS)}")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise UsageError(
                f"replicas: need 0 <= min ({self.min_replicas}) <= max ({self.max_replicas}) and max >= 1"
            )
        if self.gpus < 0:
            raise UsageError(f"--gpus must be 0 or more, got {self.gpus}")
        if self.mode is Mode.STANDARD and self.canary_percent is not None:
            service = f"{self.name}-{canary_name(self.model_version)}-predictor"
            if len(service) > 63:
                raise UsageError(
                    f"the canary's Service {service!r} would be longer than 63 characters",
                    hint="use a shorter InferenceService name (--name) or model version",
                )
        return self

    @property
    def effective_mode(self) -> Mode:
        """The mode to render in when no live object decides (AUTO: Serverless, as always)."""
        return Mode.SERVERLESS if self.mode is Mode.AUTO else self.mode


def _annotations(spec: ServiceSpec) -> dict[str, str]:
    return {
        TAG_ROUTING: "true",
        MODEL_ANNOTATION: spec.model,
        MODEL_VERSION_ANNOTATION: spec.model_version,
    }


def model_block(spec: ServiceSpec) -> dict[str, Any]:
    """``predictor.model`` of a model version (also a Standard-mode canary's)."""
    model: dict[str, Any] = {
        "modelFormat": {"name": "triton"},
        "protocolVersion": spec.protocol,
        "storageUri": spec.storage_uri,
    }
    if spec.runtime:
        model["runtime"] = spec.runtime
    if spec.runtime_version:
        model["runtimeVersion"] = spec.runtime_version
    if spec.gpus:
        model["resources"] = {"limits": {"nvidia.com/gpu": str(spec.gpus)}}
    return model


def render(spec: ServiceSpec) -> dict[str, Any]:
    """The whole InferenceService, as created when none exists yet.

    Serverless carries ``canaryTrafficPercent`` (harmless on a first revision) and tag routing;
    Standard has neither (no Knative): its first version takes all traffic, a canary comes
    with the next release, as a ``spec.canary`` entry (``standard.canary_patch``).
    """
    spec.check()
    mode = spec.effective_mode
    predictor: dict[str, Any] = {"minReplicas": spec.min_replicas, "maxReplicas": spec.max_replicas}
    if spec.canary_percent is not None and mode is Mode.SERVERLESS:
        predictor["canaryTrafficPercent"] = spec.canary_percent
    predictor["model"] = model_block(spec)
    annotations = _annotations(spec)
    if mode is Mode.STANDARD:
        annotations.pop(TAG_ROUTING)  # a Knative feature: Standard mode has no revisions to tag
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "annotations": {DEPLOYMENT_MODE: mode.annotation, **annotations},
        },
        "spec": {"predictor": predictor},
    }


def render_standalone(spec: ServiceSpec) -> dict[str, Any]:
    """The InferenceService ``builder release render`` prints, for a user to apply themselves.

    Refused in Standard mode with a canary percent: a rendered object is the whole
    InferenceService, whose one predictor takes all traffic in Standard mode (KServe ignores
    ``canaryTrafficPercent`` there: no Knative revisions to split between); a Standard-mode
    canary is a ``spec.canary`` entry beside the live stable predictor, a patch ``release
    apply`` builds from the live object. Printing the object without the canary would roll the
    version out to all traffic, the opposite of what was asked."""
    spec.check()
    if spec.effective_mode is Mode.STANDARD and spec.canary_percent is not None:
        raise UsageError(
            "--canary-percent cannot be rendered in Standard mode: KServe ignores "
            "canaryTrafficPercent there, and a rendered InferenceService sends all traffic to this version",
            hint="use `builder release apply --mode standard --canary-percent N` (a spec.canary entry "
            "beside the live predictor; --dry-run prints it), or render --mode serverless",
        )
    return render(spec)


def release_patch(spec: ServiceSpec) -> dict[str, Any]:
    """The Serverless JSON merge patch that puts a new model version on an existing one.

    A new ``storageUri`` makes KServe create a revision; with ``canaryTrafficPercent`` it gets
    that share of traffic, the previous rolled-out revision the rest. Without a canary percent
    the patch sets null, i.e. removes the field: the new revision takes all traffic when ready.
    """
    spec.check()
    return {
        "metadata": {"annotations": _annotations(spec)},
        "spec": {
            "predictor": {
                "canaryTrafficPercent": spec.canary_percent,
                "model": {"storageUri": spec.storage_uri},
            }
        },
    }


def release_annotations(spec: ServiceSpec) -> dict[str, Any]:
    """The metadata part of a release patch, the same in both modes."""
    annotations: dict[str, Any] = _annotations(spec)
    if spec.mode is Mode.STANDARD:
        annotations.pop(TAG_ROUTING)
    return {"annotations": annotations}


def promote_patch() -> dict[str, Any]:
    """Remove ``canaryTrafficPercent`` (null in a merge patch): the newest revision takes 100 %."""
    return {"spec": {"predictor": {"canaryTrafficPercent": None}}}


def rollback_patch() -> dict[str, Any]:
    """``canaryTrafficPercent: 0``: all traffic back on the previous rolled-out revision."""
    return {"spec": {"predictor": {"canaryTrafficPercent": 0}}}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: what the API server does with ``application/merge-patch+json``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
