"""``gateway drift``: each served model's drift, window vs reference, as a table (or ``--json``).

It reads a running gateway's ``GET /v1/models/{model}/drift`` (what the gateway counted is in
that process), one request per model. Exit codes, so a cron job or a pipeline can act on them:

- 0: no model alerts (ok, warn, not enough rows yet, or drift off);
- 3: some model's verdict is ``alert`` (PSI >= ``GATEWAY_DRIFT_PSI_ALERT`` in some feature or the
  prediction);
- 1: the gateway is unreachable, or refused (unknown model 404, a missing key 401, a 5xx);
- 2: a usage error (a window the gateway refuses, 400; a bad option).

Subcommands live beside it: ``gateway drift report`` (gateway/payload_log/cli.py) turns the
payload log into an HTML report.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from gateway.refusal import refuse

drift_app = typer.Typer(
    help="Drift of what the models see against their training reference (docs/drift.md).",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # Click's plain help: option names are never cut at 80 columns
)

EXIT_ALERT = 3

# The options of every command that reads a running gateway's reports (drift, shadow).
UrlOpt = Annotated[str, typer.Option(help="The gateway's HTTP address")]
ModelsOpt = Annotated[list[str] | None, typer.Option("--model", help="Model(s) to report [GATEWAY_MODELS]")]
WindowOpt = Annotated[str, typer.Option(help="How far back: 5m, 1h, 24h (1m to 24h)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the reports as JSON")]
ApiKeyOpt = Annotated[
    str | None, typer.Option(envvar="GATEWAY_API_KEY", help="Key for a gateway with auth on")
]
_STYLE = {"alert": "bold red", "warn": "yellow", "ok": "green", "insufficient": "dim", "off": "dim"}


class Refused(Exception):
    """The gateway did not answer with a report; ``code`` is the exit code."""

    def __init__(self, message: str, code: int, hint: str) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint


def fetch_report(url: str, model: str, window: str, api_key: str | None, route: str = "drift") -> dict:
    """One model's report from the gateway at ``url`` (``GET /v1/models/{model}/{route}``:
    drift, shadow, quality); Refused when there is none."""
    query = urllib.parse.urlencode({"window": window})
    target = f"{url.rstrip('/')}/v1/models/{urllib.parse.quote(model, safe='')}/{route}?{query}"
    request = urllib.request.Request(target, headers={"x-api-key": api_key} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=10.0) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read())
            reason = body.get("error") or body.get("detail") or exc.reason
        except (ValueError, AttributeError):
            reason = exc.reason
        hint = {
            400: "pass a --window from 1m to 24h, e.g. 5m, 1h",
            401: "pass the gateway's key: --api-key or GATEWAY_API_KEY",
            404: "pass a --model the gateway serves (see its /readyz)",
            503: "a dependency of the gateway is down (Triton, the online store or the shared store): "
            "its /readyz says which; retry once it is back",
        }.get(exc.code, "see the gateway's log")
        raise Refused(
            f"{model}: the gateway answered {exc.code}: {reason}", 2 if exc.code == 400 else 1, hint
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        raise Refused(
            f"the gateway at {url} is unreachable: {why}",
            1,
            "start the gateway (`gateway serve`), or pass --url of a running one",
        ) from None


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def table(report: dict[str, Any], version: dict[str, Any]) -> Table:
    """One version's drift as a rich table: a row per feature, then the prediction."""
    title = (
        f"{report['model']} version {version['version']}: {version['rows']} rows in {report['window']}, "
        f"verdict [{_STYLE.get(version['verdict'], '')}]{version['verdict']}[/]"
    )
    # A light box, and nothing cut: at 80 columns a boxed table cut the words that carry the
    # meaning (merchant_frau…); cells never wrap, so a narrow terminal scrolls instead.
    out = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    rows = [*version["features"], *([version["prediction"]] if version.get("prediction") else [])]
    for col in ("feature", "PSI", "χ² p", "KS (crit.)", "null Δ", "verdict"):
        out.add_column(col, justify="left" if col in ("feature", "verdict") else "right", no_wrap=True)
    for i, f in enumerate(rows):
        name = f"{f['name']} (prediction)" if i == len(version["features"]) else f["name"]
        ks = "-" if f["ks"] is None else f"{f['ks']:.3f} ({_num(f['ks_critical'])})"
        style = _STYLE.get(f["verdict"], "")
        out.add_row(
            name,
            _num(f["psi"]),
            _num(f["chi2_p"], 4),
            ks,
            _signed(f["null_rate_change"]),
            f"[{style}]{f['verdict']}[/]",
        )
    return out


def exit_code(reports: list[dict[str, Any]]) -> int:
    return EXIT_ALERT if any(r["verdict"] == "alert" for r in reports) else 0


@drift_app.callback()
def drift(
    ctx: typer.Context,
    url: UrlOpt = "http://127.0.0.1:8080",
    model: ModelsOpt = None,
    window: WindowOpt = "1h",
    json_output: JsonOpt = False,
    api_key: ApiKeyOpt = None,
) -> None:
    """Each model's drift, window vs training reference: exit 0 no alert, 3 alert, 1 unreachable
    or refused, 2 usage."""
    if ctx.invoked_subcommand is not None:
        return
    models = model or default_models()
    try:
        reports = [fetch_report(url, m, window, api_key) for m in models]
    except Refused as exc:
        raise refuse(str(exc), exc.hint, exc.code) from None
    if json_output:
        sys.stdout.write(json.dumps({"reports": reports}, indent=2) + "\n")
    else:
        out = Console(highlight=False)
        for report in reports:
            for version in report["versions"]:
                if version["verdict"] == "off":
                    out.print(
                        f"{report['model']} version {version['version']}: drift off ({version.get('reason')})"
                    )
                    continue
                out.print(table(report, version))
            out.print(f"{report['model']}: [{_STYLE.get(report['verdict'], '')}]{report['verdict']}[/]")
    raise typer.Exit(exit_code(reports))


def default_models() -> list[str]:
    """The models the gateway serves by the same setting (``GATEWAY_MODELS``)."""
    from pydantic import ValidationError

    from gateway.settings import GatewaySettings

    try:
        return list(GatewaySettings.model_validate({}).models)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise refuse(
            f"setting {'.'.join(map(str, first['loc']))}: {first['msg']}",
            "fix the GATEWAY_* variable it names, or pass --model",
            2,
        ) from None
