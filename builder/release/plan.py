"""What a release command would send, for ``--dry-run``: each request with method, path and body.

The plan is checked against KServe's CRD before it is printed: created objects as they are,
patches by applying them (RFC 7386, as the API server does) to the object they would change --
the rendered one for ``apply``, a minimal canary for ``promote``/``rollback``, whose live
object only a cluster knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.release import schema
from builder.release.kube import MERGE_PATCH
from builder.release.manifest import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    ServiceSpec,
    merge_patch,
    promote_patch,
    release_patch,
    render,
    rollback_patch,
)


@dataclass(frozen=True)
class Plan:
    operation: str
    name: str
    namespace: str
    requests: list[dict[str, Any]] = field(default_factory=list)

    def to_doc(self) -> dict[str, Any]:
        return {
            "dryRun": True,
            "note": "nothing was sent to the cluster",
            "operation": self.operation,
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
    """A minimal live-looking InferenceService in mid-canary, to check a patch's result on."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "predictor": {
                "canaryTrafficPercent": 10,
                "model": {"modelFormat": {"name": "triton"}, "storageUri": "s3://example/model_repo"},
            }
        },
    }


def apply_plan(spec: ServiceSpec, crd: Path | None) -> Plan:
    """Create when absent, merge-patch the release fields when present."""
    manifest = render(spec)
    patch = release_patch(spec)
    schema.check(manifest, crd)
    schema.check(merge_patch(manifest, patch), crd, "InferenceService after the patch")
    return Plan(
        "apply",
        spec.name,
        spec.namespace,
        [
            {
                "when": "the InferenceService does not exist",
                "method": "POST",
                "path": _collection(spec.namespace),
                "body": manifest,
            },
            _patch_request(spec.namespace, spec.name, patch, "the InferenceService exists"),
        ],
    )


def traffic_plan(operation: str, name: str, namespace: str, crd: Path | None) -> Plan:
    """``promote`` (remove canaryTrafficPercent) or ``rollback`` (set it to 0)."""
    patch = promote_patch() if operation == "promote" else rollback_patch()
    schema.check(
        merge_patch(_example_canary(name, namespace), patch), crd, f"InferenceService after {operation}"
    )
    return Plan(operation, name, namespace, [_patch_request(namespace, name, patch, "always")])
