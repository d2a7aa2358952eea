"""Does the target answer, and is it ready? Checked before any load, in seconds, never hanging.

Each user class is probed the way it will be loaded: the gateway's ``/readyz``; Triton's
``/v2/health/ready`` and ``/v2/models/{model}/ready`` over HTTP; ``ServerReady`` and
``ModelReady`` over gRPC. Every call has a short timeout; ``wait_s`` retries until then (a
freshly rolled-out canary may need a moment), otherwise one attempt decides.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import quote

from loadtests.errors import TargetDownError
from loadtests.targets import UserClass, parse_grpc_target

PROBE_TIMEOUT_S = 3.0
RETRY_EVERY_S = 1.0


class NotReady(Exception):
    """One probe attempt failed; the message says how."""


def _get(url: str, headers: dict[str, str], timeout: float) -> None:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read(1024)
    except urllib.error.HTTPError as exc:
        body = exc.read(300).decode(errors="replace").strip()
        raise NotReady(f"{url} answered HTTP {exc.code}" + (f": {body}" if body else "")) from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        text = getattr(reason, "strerror", None) or str(reason)
        raise NotReady(f"nothing answers at {url} ({text})") from exc
    except TimeoutError as exc:
        raise NotReady(f"{url} did not answer within {timeout:g} s") from exc
    except OSError as exc:  # connection reset and friends
        raise NotReady(f"{url}: {exc}") from exc


def _http_probe(urls: list[str], api_key: str, timeout: float) -> Callable[[], None]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def probe() -> None:
        for url in urls:
            _get(url, headers, timeout)

    return probe


def _grpc_probe(target: str, model: str, version: str, api_key: str, timeout: float) -> Callable[[], None]:
    def probe() -> None:
        # Imported here: only gRPC gates pay for it. tritonclient.grpc does not import gevent.
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        parsed = parse_grpc_target(target)
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        client = grpcclient.InferenceServerClient(parsed.address, ssl=parsed.ssl)
        try:
            if not client.is_server_ready(headers=headers, client_timeout=timeout):
                raise NotReady(f"Triton at {target} answers but is not ready")
            if not client.is_model_ready(model, version, headers=headers, client_timeout=timeout):
                raise NotReady(f"model {model!r} is not ready on {target}")
        except InferenceServerException as exc:
            status = exc.status() or ""
            if "UNAVAILABLE" in status:
                raise NotReady(f"nothing answers at {target} (gRPC UNAVAILABLE)") from exc
            if "DEADLINE_EXCEEDED" in status:
                raise NotReady(f"{target} did not answer within {timeout:g} s") from exc
            raise NotReady(f"{target}: {exc.message()}") from exc
        finally:
            client.close()

    return probe


def make_probe(
    user_class: UserClass,
    target: str,
    model: str,
    version: str = "",
    api_key: str = "",
    timeout: float = PROBE_TIMEOUT_S,
) -> Callable[[], None]:
    """The readiness check for ``user_class`` on ``target`` (raises NotReady)."""
    if user_class.protocol == "grpc":
        return _grpc_probe(target, model, version, api_key, timeout)
    base = target.rstrip("/")
    if user_class.key == "gateway":
        return _http_probe([f"{base}/readyz"], api_key, timeout)
    model_path = f"/v2/models/{quote(model, safe='')}" + (f"/versions/{quote(version)}" if version else "")
    return _http_probe([f"{base}/v2/health/ready", f"{base}{model_path}/ready"], api_key, timeout)


def check_target(probe: Callable[[], None], wait_s: float = 0.0) -> None:
    """Run ``probe`` until it passes or ``wait_s`` has passed; TargetDownError then."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            probe()
            return
        except NotReady as exc:
            if time.monotonic() + RETRY_EVERY_S > deadline:
                waited = f" (waited {wait_s:g} s)" if wait_s else ""
                raise TargetDownError(
                    f"target not ready: {exc}{waited}",
                    hint="start the server (or check --target / --user-class), or pass --wait-ready SECONDS",
                ) from exc
        time.sleep(RETRY_EVERY_S)
