"""The Kubernetes API, through the official ``kubernetes`` client's ``CustomObjectsApi``.

``InferenceServices`` wraps the three calls a rollout makes (get, create, merge-patch), with a
timeout on every request and every failure translated into a ``ReleaseError`` in one place.
Anything shaped like ``CustomObjectsApi`` can be injected (``CustomObjects``), which is how the
tests run the rollout without a cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict, Unpack

from builder.release.api import GROUP, PLURAL, VERSION
from builder.release.errors import ReleaseError

MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT_S = 15.0
FIELD_MANAGER = "builder-release"


class PatchOptions(TypedDict):
    """The keyword options ``InferenceServices.patch`` sends with a merge patch.

    The client's method takes the object's path and body positionally and these (with a dozen
    more we never send) as keywords: typed as one dict here, so the protocol states what the
    rollout sends without restating the client's whole signature. mypy still checks the real
    ``CustomObjectsApi`` (returned by ``connect``) against it."""

    field_manager: str
    _request_timeout: float
    _content_type: str
    dry_run: NotRequired[str]  # "All": the API server's dry run


class CustomObjects(Protocol):
    """The part of ``kubernetes.client.CustomObjectsApi`` the rollout uses (its signatures, the
    patch's keyword options as ``PatchOptions``)."""

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, *, _request_timeout: float
    ) -> Any: ...

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
    ) -> Any: ...

    def patch_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: dict[str, Any],
        **options: Unpack[PatchOptions],
    ) -> Any: ...


def connect(kubeconfig: Path | None = None, context: str | None = None) -> CustomObjects:
    """A real ``CustomObjectsApi`` from the kubeconfig (``$KUBECONFIG``, ~/.kube/config), else
    the in-cluster service account (a pipeline running in a pod)."""
    from kubernetes import client, config

    try:
        api_client = config.new_client_from_config(
            config_file=str(kubeconfig) if kubeconfig else None, context=context, persist_config=False
        )
    except (config.ConfigException, OSError) as exc:
        if kubeconfig is not None or context is not None:
            raise ReleaseError(
                f"cannot load kubeconfig {kubeconfig or '(default)'} context {context or '(current)'}: {exc}",
                hint="check --kubeconfig / --context (or $KUBECONFIG)",
            ) from exc
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as in_cluster:
            raise ReleaseError(
                f"no Kubernetes configuration: {exc}; not in a cluster either ({in_cluster})",
                hint="set $KUBECONFIG or pass --kubeconfig; or use --dry-run to print the requests",
            ) from in_cluster
        api_client = client.ApiClient(configuration)
    return client.CustomObjectsApi(api_client)


def _status(exc: Exception) -> dict[str, Any]:
    """The API server's Status object in an error's body ({} when the body is not one)."""
    try:
        status = json.loads(getattr(exc, "body", None) or "")
    except (TypeError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def _reason(exc: Exception) -> str:
    """The API server's own message when there is one, else the HTTP reason."""
    message = _status(exc).get("message")
    return str(message or getattr(exc, "reason", None) or exc).strip()


class InferenceServices:
    """InferenceServices of one namespace."""

    def __init__(
        self, api: CustomObjects, namespace: str, request_timeout: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.request_timeout = request_timeout

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            return fn(
                GROUP, VERSION, self.namespace, PLURAL, *args, _request_timeout=self.request_timeout, **kwargs
            )
        except ApiException as exc:
            status = exc.status
            hints = {
                401: "the credentials were refused: refresh your kubeconfig",
                403: f"your account may not {what} inferenceservices in namespace {self.namespace}",
                404: "is KServe installed, and are namespace and name right?",
                409: "someone changed it meanwhile: run the command again",
                422: "the API server rejected the object: see the message",
            }
            raise ReleaseError(
                f"Kubernetes API: cannot {what} InferenceService in {self.namespace} "
                f"(HTTP {status}): {_reason(exc)}",
                hint=hints.get(status or 0),
            ) from exc
        except (Urllib3Error, OSError) as exc:
            raise ReleaseError(
                f"cannot reach the Kubernetes API server: {exc}",
                hint="check the cluster address in your kubeconfig and the network",
            ) from exc

    def get(self, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        from kubernetes.client.exceptions import ApiException

        try:
            found: dict[str, Any] = self._call("read", self.api.get_namespaced_custom_object, name)
            return found
        except ReleaseError as exc:
            cause = exc.__cause__
            # Only "this object is not there" means absent; a 404 for the whole resource type
            # (KServe not installed) stays an error.
            if isinstance(cause, ApiException) and cause.status == 404:
                status = _status(cause)
                if status.get("reason") == "NotFound" and status.get("details", {}).get("name") == name:
                    return None
            raise

    def require(self, name: str) -> dict[str, Any]:
        found = self.get(name)
        if found is None:
            raise ReleaseError(
                f"InferenceService {name} not found in namespace {self.namespace}",
                hint="create it with `builder release apply` (or the Helm chart) first",
            )
        return found

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self._call(
            "create", self.api.create_namespaced_custom_object, body, field_manager=FIELD_MANAGER
        )
        return created

    def patch(self, name: str, patch: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386): null removes a field, lists are replaced whole.

        ``dry_run``: the API server's own (``dryRun=All``): admission, validation and pruning
        run, nothing is stored; the answer is the object as it would be."""
        patched: dict[str, Any] = self._call(
            "patch",
            self.api.patch_namespaced_custom_object,
            name,
            patch,
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
            **({"dry_run": "All"} if dry_run else {}),
        )
        return patched
