"""What a release command would send, for ``--dry-run``: each request with method, path and body.

The plan is checked against KServe's CRD before it is printed: created objects as they are,
patches by applying them (RFC 7386, as the API server does) to the object they would change --
the rendered one for ``apply``, a minimal canary for ``promote``/``rollback``, whose live
object only a cluster knows. With ``--mode auto`` (no live object to read the mode from) the
plan holds the patch for each mode, each with its ``when``; a mode the CRD cannot do (a
Standard-mode canary on KServe < 0.20) is listed as ``refused``, with its exit code.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from builder.release import modes, schema
from builder.release import standard as standard_rollout
from builder.release.api import (
    API_VERSION,
    DEPLOYMENT_MODE,
    GROUP,
    KIND,
    MODEL_VERSION_ANNOTATION,
    PLURAL,
    VERSION,
)
from builder.release.errors import ManifestError
from builder.release.kube import MERGE_PATCH
from builder.release.manifest import (
    ServiceSpec,
    merge_patch,
    promote_patch,
    release_patch,
    render,
    rollback_patch,
)
from builder.release.modes import Mode


@dataclass(frozen=True)
class Plan:
    operation: str
    name: str
    namespace: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    mode: str = Mode.AUTO.value

    def to_doc(self) -> dict[str, Any]:
        return {
            "dryRun": True,
            "note": "nothing was sent to the cluster",
            "operation": self.operation,
            "mode": self.mode,
            "inferenceService": {"name": self.name, "namespace": self.namespace},
            "requests": self.requests,
        }


def _collection(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def _patch_request(namespace: str, name: str, body: dict[str, Any], when: str) -> dict[str, Any]:
    return {
        "when": when,
        "method": "PATCH",
        "path": f"{_collection(namespace)}/{name}",
        "contentType": MERGE_PATCH,
        "body": body,
    }


def _example_canary(name: str, namespace: str) -> dict[str, Any]:
    """A minimal live-looking Serverless InferenceService in mid-canary, to check a patch on."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "annotations": {DEPLOYMENT_MODE: "Serverless"}},
        "spec": {
            "predictor": {
                "canaryTrafficPercent": 10,
                "model": {"modelFormat": {"name": "triton"}, "storageUri": "s3://example/model_repo"},
            }
        },
    }


def _example_standard_canary(name: str, namespace: str) -> dict[str, Any]:
    """The same in Standard mode: stable v1, version 2's canary (``v2``) at 10 %."""
    model = {"modelFormat": {"name": "triton"}, "protocolVersion": "v2"}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {DEPLOYMENT_MODE: "Standard", MODEL_VERSION_ANNOTATION: "2"},
        },
        "spec": {
            "predictor": {"model": {**model, "storageUri": "s3://example/model_repo/v1"}},
            "canary": [
                {
                    "trafficPercent": 10,
                    "predictor": {
                        "name": "v2",
                        "model": {
                            **model,
                            "name": standard_rollout.CONTAINER,
                            "storageUri": "s3://example/model_repo/v2",
                        },
                    },
                }
            ],
        },
    }


def _modes(requested: Mode) -> list[Mode]:
    """Without a live object to ask, ``auto`` plans for both modes."""
    return [Mode.SERVERLESS, Mode.STANDARD] if requested is Mode.AUTO else [requested]


def _when(requested: Mode, mode: Mode, what: str) -> str:
    return what if requested is not Mode.AUTO else f"{what}, in {mode.annotation} mode"


def _standard_patch(spec: ServiceSpec, crd: Path | None) -> dict[str, Any]:
    standard = replace(spec, mode=Mode.STANDARD)
    if spec.canary_percent is None:
        return standard_rollout.full_patch(standard, None)
    modes.require_canary_crd(crd)
    return standard_rollout.canary_patch(standard, None)


def apply_plan(spec: ServiceSpec, crd: Path | None) -> Plan:
    """Create when absent, merge-patch the release fields when present (per mode with auto)."""
    manifest = render(spec)  # auto creates a Serverless one, as the live command does
    schema.check(manifest, crd)
    requests: list[dict[str, Any]] = [
        {
            "when": "the InferenceService does not exist",
            "method": "POST",
            "path": _collection(spec.namespace),
            "body": manifest,
        }
    ]
    for mode in _modes(spec.mode):
        when = _when(spec.mode, mode, "the InferenceService exists")
        if mode is Mode.SERVERLESS:
            patch = release_patch(replace(spec, mode=Mode.SERVERLESS))
            before = render(replace(spec, mode=Mode.SERVERLESS))
            requests.append(_patch_request(spec.namespace, spec.name, patch, when))
        else:
            try:
                patch = _standard_patch(spec, crd)
            except ManifestError as exc:
                if spec.mode is not Mode.AUTO:
                    raise
                requests.append({"when": when, "refused": exc.message, "exitCode": exc.exit_code})
                continue
            before = render(replace(spec, mode=Mode.STANDARD))
            request = _patch_request(spec.namespace, spec.name, patch, when)
            if spec.canary_percent is not None:
                # sent first with dryRun=All: an API server that prunes spec.canary (KServe < 0.20)
                # is caught before anything changes
                request["serverDryRunFirst"] = True
            requests.append(request)
        schema.check(merge_patch(before, patch), crd, "InferenceService after the patch")
    return Plan("apply", spec.name, spec.namespace, requests, mode=spec.mode.value)


def traffic_plan(operation: str, name: str, namespace: str, crd: Path | None, mode: Mode = Mode.AUTO) -> Plan:
    """``promote`` or ``rollback``, per mode. Serverless: remove canaryTrafficPercent / set it
    to 0. Standard: built from the live ``spec.canary``, shown here on an example canary."""
    requests: list[dict[str, Any]] = []
    for each in _modes(mode):
        when = _when(mode, each, "always")
        if each is Mode.SERVERLESS:
            live = _example_canary(name, namespace)
            patch = promote_patch() if operation == "promote" else rollback_patch()
            request = _patch_request(namespace, name, patch, when)
        else:
            try:
                modes.require_canary_crd(crd)
            except ManifestError as exc:
                if mode is not Mode.AUTO:
                    raise
                requests.append({"when": when, "refused": exc.message, "exitCode": exc.exit_code})
                continue
            live = _example_standard_canary(name, namespace)
            if operation == "promote":
                patch = standard_rollout.promote_patch(live)
            else:
                patch = standard_rollout.rollback_patch(live)
            request = _patch_request(namespace, name, patch, when)
            request["bodyFrom"] = (
                "the live spec.canary: shown for an example canary 'v2' (version 2); the real body "
                "carries the release's canary entry and keeps any other canaries"
            )
        schema.check(merge_patch(live, patch), crd, f"InferenceService after {operation}")
        requests.append(request)
    return Plan(operation, name, namespace, requests, mode=mode.value)
