"""``gateway fallback status|reset|engage MODEL``: the CRITICAL switch, read or changed by hand.

It talks to a running gateway (``GET``/``POST /v1/models/{model}/fallback``); the decision lives
in the shared store, so any replica's address will do and every replica follows within a
second. Exit codes: 0 done (``status``: the champion serves), 3 ``status`` while the fallback
serves, 1 the gateway is unreachable or refused, 2 a usage error.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Annotated, Any

import typer

from gateway.drift.cli import ApiKeyOpt, JsonOpt, UrlOpt
from gateway.refusal import refuse

EXIT_ON_FALLBACK = 3
fallback_app = typer.Typer(
    help="The CRITICAL switch to a model's fallback (GATEWAY_FALLBACK): status, reset, engage.",
    no_args_is_help=True,
)
ModelArg = Annotated[str, typer.Argument(help="The model (as callers name it)")]
ReasonOpt = Annotated[str, typer.Option(help="Why, for the log and the status")]


def _call(url: str, model: str, api_key: str | None, body: dict[str, str] | None = None) -> dict[str, Any]:
    target = f"{url.rstrip('/')}/v1/models/{urllib.parse.quote(model, safe='')}/fallback"
    headers = {"content-type": "application/json", **({"x-api-key": api_key} if api_key else {})}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        target, data=data, headers=headers, method="GET" if body is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10.0) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error") or exc.reason
        except (ValueError, AttributeError):
            reason = exc.reason
        hint = {
            400: "set GATEWAY_FALLBACK for this model on the gateway (docs/quality.md, the fallback switch)",
            401: "pass the gateway's key: --api-key or GATEWAY_API_KEY",
            404: "pass a model the gateway serves (see its /readyz)",
            503: "the shared store (Redis) is not answering: retry once it is back",
        }.get(exc.code, "see the gateway's log")
        raise refuse(f"{model}: the gateway answered {exc.code}: {reason}", hint, 1) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise refuse(
            f"cannot reach the gateway at {url}: {why}", "check --url (http://host:port)", 1
        ) from None


def _show(status: dict[str, Any], json_output: bool) -> None:
    if json_output:
        sys.stdout.write(json.dumps(status, indent=2) + "\n")
        return
    model = status["model"]
    if not status.get("enabled"):
        print(f"{model}: no fallback ({status.get('reason')})")
        return
    decision, judged = status.get("decision") or {}, status.get("judged") or {}
    rule = status["rule"]
    serving = f"the fallback {decision.get('fallback')}" if status["active"] else "the champion"
    print(f"{model}: serving {serving}" + (f" since {decision.get('reason')}" if decision else ""))
    if judged:
        value = judged.get("value")
        shown = "-" if value is None else f"{value:.4f}"
        print(
            f"  {rule['metric']} {shown} over {judged.get('rows')} labels (threshold {rule['threshold']}, "
            f"at least {rule['min_labels']} labels, window {rule['window']})"
        )
        if judged.get("problem"):
            print(f"  cannot switch: {judged['problem']}")


def status(
    model: ModelArg,
    url: UrlOpt = "http://127.0.0.1:8080",
    json_output: JsonOpt = False,
    api_key: ApiKeyOpt = None,
) -> None:
    """The decision, the rule and the champion's judged figure: exit 0 the champion serves, 3 the
    fallback serves."""
    found = _call(url, model, api_key)
    _show(found, json_output)
    raise typer.Exit(EXIT_ON_FALLBACK if found.get("active") else 0)


def reset(
    model: ModelArg,
    url: UrlOpt = "http://127.0.0.1:8080",
    reason: ReasonOpt = "reset by command",
    json_output: JsonOpt = False,
    api_key: ApiKeyOpt = None,
) -> None:
    """Serve the champion again on every replica; the rule re-arms on labels that arrive from now."""
    _show(_call(url, model, api_key, {"action": "reset", "reason": reason}), json_output)


def engage(
    model: ModelArg,
    url: UrlOpt = "http://127.0.0.1:8080",
    reason: ReasonOpt = "engaged by command",
    json_output: JsonOpt = False,
    api_key: ApiKeyOpt = None,
) -> None:
    """Switch every replica to the fallback now, without waiting for the rule."""
    _show(_call(url, model, api_key, {"action": "engage", "reason": reason}), json_output)


fallback_app.command("status")(status)
fallback_app.command("reset")(reset)
fallback_app.command("engage")(engage)
