"""A stand-in for the Kubernetes API server and KServe's controller, which cannot run here.

``FakeKServe`` is injected where ``kubernetes.client.CustomObjectsApi`` would be: it has the
three methods the rollout calls, with the real signatures, and answers as the API server does
for them -- 404 ``Status`` bodies (``reason: NotFound``), 409 on a second create, RFC 7386 merge
patches (and only with the merge-patch content type), ``metadata.generation`` bumped when the
spec changes, client writes to ``status`` ignored, and every stored object checked against
KServe's CRD schema (422 otherwise), the checks the real API server applies to this CRD.

Its ``status`` is this file's model of KServe's Serverless controller, not the controller itself:
a spec change of the predictor (other than the traffic percent) creates revision
``<name>-predictor-0000N``, ready after ``ready_after`` reads (never when ``broken``); the
traffic follows ``canaryTrafficPercent`` between the newest revision and the last one rolled out
at 100 %, with ``latest-``/``prev-`` tag URLs; ``observedGeneration`` catches up on each read.
That model is what the rollout's waiting and transitions are tested against.

Standard mode (annotation ``serving.kserve.io/deploymentMode: Standard``) is modelled after
KServe 0.20 (kserve/kserve#5672): one Deployment per predictor name (the stable one, and each
``spec.canary`` entry with its predictor laid over the stable one), new or changed ones ready
after ``ready_after`` reads; a Deployment whose name and pod template already run is reused
(promotion retargets the stable predictor to the canary's: no restart); unreferenced ones go.
``status.canaryStatuses`` lists each canary with its ``trafficPercent`` and readiness.
``canary_field=False`` serves a KServe < 0.20 CRD: the API server silently prunes
``spec.canary``, as it prunes every field a structural schema does not declare. Patches honour
``dry_run="All"`` (validated and pruned, not stored).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from builder.release import rollout
from builder.release.api import GROUP, PLURAL, VERSION
from builder.release.kube import InferenceServices
from builder.release.manifest import (
    merge_patch,
)
from tests.helm.helpers import REPO_ROOT, crd_errors

DOMAIN = "serving.example.com"


def _status_error(code: int, reason: str, message: str, name: str) -> ApiException:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": name, "group": GROUP, "kind": PLURAL},
        "code": code,
    }
    return ApiException(status=code, reason=reason, body=json.dumps(body))


@dataclass
class _Revisions:
    """The controller's memory of one InferenceService."""

    names: list[str] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    ready_at: list[int] = field(default_factory=list)  # the read count from which each is ready
    rolled_out: str | None = None
    previous_rolled_out: str | None = None
    # Standard mode: predictor name ("" = the default one) -> (pod template, ready from read N)
    deployments: dict[str, tuple[dict[str, Any], int]] = field(default_factory=dict)


class FakeKServe:
    """``CustomObjectsApi``-shaped; see the module docstring for what it models."""

    def __init__(self, ready_after: int = 0, broken: bool = False, canary_field: bool = True) -> None:
        self.ready_after = ready_after
        self.broken = broken
        self.canary_field = canary_field
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.reads = 0
        self._revisions: dict[tuple[str, str], _Revisions] = {}
        self.fail_next: ApiException | None = None

    # ---- the API server ------------------------------------------------------------------
    def _route(self, group: str, version: str, plural: str) -> None:
        if (group, version, plural) != (GROUP, VERSION, PLURAL):
            raise ApiException(status=404, reason="Not Found", body="404 page not found")
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error

    def _validated(self, obj: dict[str, Any]) -> dict[str, Any]:
        if not self.canary_field:
            obj.get("spec", {}).pop("canary", None)  # pruned: not in this KServe's CRD
        errors = crd_errors(obj)
        if errors:
            name = obj.get("metadata", {}).get("name", "")
            raise _status_error(
                422, "Invalid", f"InferenceService.serving.kserve.io {name!r} is invalid: {errors}", name
            )
        return obj

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, *, _request_timeout: float
    ) -> dict[str, Any]:
        self._route(group, version, plural)
        self.calls.append(("get", name))
        key = (namespace, name)
        if key not in self.objects:
            raise _status_error(
                404, "NotFound", f'inferenceservices.serving.kserve.io "{name}" not found', name
            )
        self.reads += 1
        self._reconcile(key)
        return copy.deepcopy(self.objects[key])

    def create_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        body: dict[str, Any],
        *,
        field_manager: str,
        _request_timeout: float,
    ) -> dict[str, Any]:
        self._route(group, version, plural)
        name = body["metadata"]["name"]
        self.calls.append(("create", copy.deepcopy(body)))
        key = (namespace, name)
        if key in self.objects:
            raise _status_error(
                409, "AlreadyExists", f'inferenceservices.serving.kserve.io "{name}" already exists', name
            )
        obj = self._validated(copy.deepcopy(body))
        obj.pop("status", None)
        obj["metadata"] |= {"namespace": namespace, "generation": 1, "uid": f"uid-{name}"}
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def patch_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: dict[str, Any],
        *,
        field_manager: str,
        _request_timeout: float,
        _content_type: str,
        dry_run: str | None = None,
    ) -> dict[str, Any]:
        self._route(group, version, plural)
        if dry_run not in (None, "All"):
            raise ApiException(status=400, reason=f"invalid dryRun {dry_run!r}")
        if _content_type != "application/merge-patch+json":
            raise ApiException(status=415, reason=f"Unsupported Media Type {_content_type}")
        self.calls.append(("dry-run patch" if dry_run else "patch", copy.deepcopy(body)))
        key = (namespace, name)
        if key not in self.objects:
            raise _status_error(
                404, "NotFound", f'inferenceservices.serving.kserve.io "{name}" not found', name
            )
        current = self.objects[key]
        # the status subresource: writes to the main resource cannot change status
        patched = merge_patch(current, {k: v for k, v in body.items() if k != "status"})
        patched["status"] = current.get("status")
        if patched.get("status") is None:
            patched.pop("status")
        self._validated({k: v for k, v in patched.items() if k != "status"})
        if patched.get("spec") != current.get("spec"):
            patched["metadata"]["generation"] = current["metadata"]["generation"] + 1
        if dry_run:
            return copy.deepcopy(patched)
        self.objects[key] = patched
        return copy.deepcopy(patched)

    # ---- KServe's controller, as modelled here -----------------------------------------------
    def _reconcile(self, key: tuple[str, str]) -> None:
        obj = self.objects[key]
        namespace, name = key
        revs = self._revisions.setdefault(key, _Revisions())
        mode = (obj["metadata"].get("annotations") or {}).get("serving.kserve.io/deploymentMode")
        if mode in ("Standard", "RawDeployment"):
            self._reconcile_standard(obj, revs)
            return
        predictor = copy.deepcopy(obj["spec"]["predictor"])
        canary = predictor.pop("canaryTrafficPercent", None)
        if not revs.templates or revs.templates[-1] != predictor:
            revs.names.append(f"{name}-predictor-{len(revs.names) + 1:05d}")
            revs.templates.append(predictor)
            revs.ready_at.append(10**9 if self.broken else self.reads + self.ready_after)
        newest = revs.names[-1]
        ready = [n for n, at in zip(revs.names, revs.ready_at, strict=True) if self.reads >= at]
        newest_ready = bool(ready) and ready[-1] == newest

        host = f"{name}-predictor.{namespace}.{DOMAIN}"
        if newest_ready and revs.rolled_out is None:
            revs.rolled_out = newest  # the first revision takes everything: nothing to split with
        if newest_ready and (canary is None or canary == 100) and revs.rolled_out != newest:
            revs.previous_rolled_out, revs.rolled_out = revs.rolled_out, newest
        if not newest_ready or revs.rolled_out == newest:
            serving = revs.rolled_out if not newest_ready else newest
            traffic = [{"revisionName": serving, "percent": 100, "latestRevision": serving == newest}]
        else:
            share = int(canary or 0)
            traffic = [
                {"revisionName": newest, "percent": share, "latestRevision": True},
                {"revisionName": revs.rolled_out, "percent": 100 - share, "latestRevision": False},
            ]
        for entry in traffic:
            entry["tag"] = "latest" if entry["latestRevision"] else "prev"
            entry["url"] = f"http://{entry['tag']}-{host}"
        traffic = [t for t in traffic if t["revisionName"] is not None]
        condition = {"type": "Ready", "status": "True" if newest_ready else "False"}
        if not newest_ready:
            condition |= {"reason": "RevisionMissing", "message": f"Revision {newest} is not ready"}
        obj["status"] = {
            "observedGeneration": obj["metadata"]["generation"],
            "url": f"http://{host}",
            "conditions": [condition, {"type": "PredictorReady", "status": condition["status"]}],
            "components": {
                "predictor": {
                    "latestCreatedRevision": newest,
                    **({"latestReadyRevision": ready[-1]} if ready else {}),
                    **({"latestRolledoutRevision": revs.rolled_out} if revs.rolled_out else {}),
                    **(
                        {"previousRolledoutRevision": revs.previous_rolled_out}
                        if revs.previous_rolled_out
                        else {}
                    ),
                    "traffic": traffic,
                    "url": f"http://{host}",
                }
            },
        }

    def _reconcile_standard(self, obj: dict[str, Any], revs: _Revisions) -> None:
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        stable = copy.deepcopy(obj["spec"]["predictor"])
        stable_name = stable.pop("name", "") or ""
        wanted = {stable_name: stable}
        canaries = obj["spec"].get("canary") or []
        for entry in canaries:
            predictor = copy.deepcopy(entry["predictor"])
            canary_name = predictor.pop("name")
            wanted[canary_name] = merge_patch(stable, predictor)  # laid over the stable one
        deployments = {}
        for deployment, template in wanted.items():
            known = revs.deployments.get(deployment)
            if known is not None and known[0] == template:
                deployments[deployment] = known  # same name, same pods: nothing restarts
            else:
                deployments[deployment] = (template, 10**9 if self.broken else self.reads + self.ready_after)
        revs.deployments = deployments  # the controller deletes the ones nothing refers to

        def ready(deployment: str) -> bool:
            return self.reads >= deployments[deployment][1]

        host = f"{name}-predictor.{namespace}.svc.cluster.local"
        statuses = [
            {
                "name": entry["predictor"]["name"],
                "ready": ready(entry["predictor"]["name"]),
                "trafficPercent": entry["trafficPercent"],
            }
            for entry in canaries
        ]
        stable_ready = ready(stable_name)
        conditions = [
            {"type": "Ready", "status": "True" if stable_ready else "False"}
            | (
                {}
                if stable_ready
                else {"reason": "MinimumReplicasUnavailable", "message": "stable predictor not ready"}
            ),
            {"type": "PredictorReady", "status": "True" if stable_ready else "False"},
        ]
        if canaries:
            waiting = [s["name"] for s in statuses if not s["ready"]]
            conditions.append(
                {"type": "CanaryReady", "status": "False" if waiting else "True"}
                | (
                    {"reason": "CanaryNotReady", "message": f"canary {waiting[0]} not ready"}
                    if waiting
                    else {}
                )
            )
        obj["status"] = {
            "observedGeneration": obj["metadata"]["generation"],
            "url": f"http://{host}",
            "deploymentMode": "Standard",
            "conditions": conditions,
            "components": {"predictor": {"url": f"http://{host}"}},
            **({"canaryStatuses": statuses} if statuses else {}),
        }


def builder(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", "release", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
    )


NS = "serving"


class FakeClock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def wait(
    services: InferenceServices, clock: FakeClock, timeout_s: float = 60, **kw: Any
) -> rollout.RolloutStatus:
    pacing = rollout.Pacing(poll_s=1, clock=clock, sleep=clock.sleep)
    return rollout.wait_ready(services, "fraud-detector", timeout_s=timeout_s, pacing=pacing, **kw)
