"""`make demo`: data -> feast apply -> materialize -> train a scikit-learn Pipeline from
historical features -> register (alias champion) -> builder export -> builder validate ->
builder serve (real Triton, no GPU) -> gateway serve -> predictions through the gateway over
HTTP and gRPC -> skew check -> release gate (Locust against the gateway, loose demo SLA) ->
drift: a gateway with the payload log on, traffic like the training rows, then a burst with
``amount`` x3, the drift table after each, and the payload log's HTML report
(demo/drift_step.py) -> release on evidence: a challenger version shadowed on live traffic by
two gateway processes sharing one store, labels fed back, both versions' quality and the
promotion gate's decision, then forged labels collapse the champion's quality, every process
switches to the challenger (the CRITICAL fallback) and a reset brings the champion back
(demo/shadow_step.py).

The model reads numeric features and two strings: ``merchant_category`` from the feature store
and the request's ``channel``. Its preprocessing (imputing, scaling, one-hot encoding) is part
of the exported ONNX graph, so Triton gets one typed input per column; the export adds the
fused ensemble (model -> threshold -> label in one graph), which the gateway calls.

Every step is the command a user would run; the demo only chains them and prints what they
give back. State lives in .demo/ (MLflow registry and artifacts, the payload log, the drift
report), feature_repo/data/ and model_repo/.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STATE = ROOT / ".demo"
REPO = ROOT / "model_repo"
FEATURES = ROOT / "feature_repo"
MODEL = "fraud-detector"
LOG = STATE / "payload-log"
REPORT = STATE / "drift-report.html"
SHADOW_LOG = STATE / "shadow-log"
QUALITY_REPORT = STATE / "quality-report.html"
SHADOW_MODEL = "fraud-detector-challenger"
SHADOW_STATE = STATE / "shadow-state.sqlite"  # step 10's shared store (GATEWAY_STATE_URL)
SPECS = STATE / "feature-specs"  # `gateway compile-features` writes them once; every gateway reads them
ENTITY_KEYS = ("user_id", "merchant_id")
console = Console(highlight=False)


_STEP_STARTED: list[float] = []  # when the current step began (time.monotonic)


def step(title: str) -> None:
    """A step's rule, after the time the one before took (where the demo's minutes go)."""
    now = time.monotonic()
    if _STEP_STARTED:
        console.print(f"[dim]({now - _STEP_STARTED[-1]:.1f} s)[/]")
        _STEP_STARTED.clear()
    _STEP_STARTED.append(now)
    console.rule(f"[bold]{title}")


def run(cmd: str, *args: str) -> None:
    """Run a project command as a user would; stop the demo if it fails."""
    console.print(f"[dim]$ {cmd} {' '.join(args)}[/]")
    result = subprocess.run([sys.executable, "-m", cmd, *args])
    if result.returncode != 0:
        sys.exit(f"demo: `{cmd} {args[0]}` failed with exit code {result.returncode}")


class Beside:
    """A project command run beside the demo's next steps (the machine has two cores, and most
    steps keep one busy), its output held back until ``finish`` prints it where the step shows it."""

    def __init__(self, cmd: str, *args: str) -> None:
        self.line = f"{cmd} {' '.join(args)}"
        self.name = f"{cmd} {args[0]}"  # as run() names a command that failed
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 (closed in finish)
        # the terminal's width and colours, as the command would have printed them on its own
        env = {**os.environ, "COLUMNS": str(console.width)}
        if console.is_terminal:
            env["FORCE_COLOR"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", cmd, *args], stdout=self.output, stderr=subprocess.STDOUT, env=env
        )

    def finish(self, note: str = "") -> None:
        """Wait for it, print what it printed; stop the demo if it failed."""
        rc = self.proc.wait()
        console.print(f"[dim]$ {self.line}[/]{f' [dim]({note})[/]' if note else ''}", soft_wrap=True)
        self.output.seek(0)
        sys.stdout.flush()
        sys.stdout.buffer.write(self.output.read())
        sys.stdout.flush()
        self.output.close()
        if rc != 0:
            sys.exit(f"demo: `{self.name}` failed with exit code {rc}")


def free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


def wait_for(
    what: str, check: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 180
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"demo: {what} exited before it was ready")
        try:
            if check():
                return
        except Exception:  # connection refused while it starts
            pass
        time.sleep(0.5)
    sys.exit(f"demo: {what} was not ready within {timeout:.0f}s")


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def http_json(url: str, body: object | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    # SIGTERM, as Kubernetes stops a pod: the same graceful stop as Ctrl-C, and not ignored where
    # the demo runs as a background job (nohup, CI), which starts its children ignoring SIGINT.
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def start_gateway(
    triton_url: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """``gateway serve`` on free ports (``env``: settings on top of this process's), once ready."""
    gp = {"http": free_port(8080), "grpc": free_port(50051)}
    args = ["serve", "--port", str(gp["http"]), "--grpc-port", str(gp["grpc"]), "--triton-url", triton_url]
    args += ["--feature-repo", str(FEATURES), "--feature-specs", str(SPECS), "--model", MODEL]
    settings = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    console.print(f"[dim]$ {settings + ' ' if settings else ''}gateway {' '.join(args)}[/]")
    # without PROMETHEUS_MULTIPROC_DIR: importing Feast set it in this process, and inherited it
    # would switch the gateway's prometheus_client to multiprocess (mmap) values (benchmarks/README.md)
    inherited = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    gateway = subprocess.Popen([sys.executable, "-m", "gateway", *args], env={**inherited, **(env or {})})
    try:
        wait_for("the gateway", lambda: http_status(f"http://127.0.0.1:{gp['http']}/readyz") == 200, gateway)
    except SystemExit:
        stop(gateway)
        raise
    return gateway, gp


ROWS: list[dict[str, Any]] = [
    {"user_id": 17, "merchant_id": 3, "amount": 42.5, "hour": 13, "channel": "pos"},
    {"user_id": 250, "merchant_id": 88, "amount": 980.0, "hour": 3, "channel": "web"},
    {"user_id": 401, "merchant_id": 12, "amount": 12.0, "hour": 20, "channel": "app"},
]


def grpc_value(name: str, value: str | int | float) -> Any:
    """A row field as the gateway's gRPC ``Value``: entity ids as ints, strings as strings, the
    numeric request fields as doubles (what the model reads them as)."""
    from gateway.proto import gateway_pb2

    if isinstance(value, str):
        return gateway_pb2.Value(string_value=value)
    if name in ENTITY_KEYS:
        return gateway_pb2.Value(int_value=int(value))
    return gateway_pb2.Value(double_value=float(value))


def merchant_categories(fs: Any, rows: list[dict[str, Any]]) -> list[str]:
    """The category the gateway will read for each row's merchant (the online store's value)."""
    online = fs.get_online_features(
        features=["merchant_stats:merchant_category"],
        entity_rows=[{"merchant_id": r["merchant_id"]} for r in rows],
    ).to_dict()
    return [value or "(none)" for value in online["merchant_category"]]


def predictions(gateway_http: str, gateway_grpc: str, fs: Any) -> None:
    import grpc

    from gateway.proto import gateway_pb2, gateway_pb2_grpc

    rows = ROWS
    status, http_result = http_json(f"http://{gateway_http}/v1/models/{MODEL}/predict", {"rows": rows})
    if status != 200:
        sys.exit(f"demo: gateway answered {status}: {http_result}")
    with grpc.insecure_channel(gateway_grpc) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = gateway_pb2.PredictRequest(
            model=MODEL,
            rows=[
                gateway_pb2.Row(fields={name: grpc_value(name, value) for name, value in r.items()})
                for r in rows
            ],
        )
        grpc_result = stub.Predict(request, timeout=10)
    table = Table(
        title=f"{MODEL} v{http_result['version']} through the gateway "
        f"(features {http_result['feature_age_seconds'] / 3600:.1f} h old)"
    )
    columns = (
        "user_id",
        "merchant_id",
        "merchant_category (store)",
        "amount",
        "hour",
        "channel",
        "score (HTTP)",
        "score (gRPC)",
        "fraud?",
    )
    for col in columns:
        table.add_column(col, justify="left" if col.startswith(("merchant_category", "channel")) else "right")
    categories = merchant_categories(fs, rows)
    for row, category, p, g in zip(
        rows, categories, http_result["predictions"], grpc_result.predictions, strict=True
    ):
        table.add_row(
            str(row["user_id"]),
            str(row["merchant_id"]),
            category,
            f"{row['amount']:.2f}",
            str(row["hour"]),
            row["channel"],
            f"{p['score']:.4f}",
            f"{g.score:.4f}",
            "yes" if p["label"] else "no",
        )
    console.print(table)
    status, err = http_json(
        f"http://{gateway_http}/v1/models/{MODEL}/predict",
        {"user_id": 999999, "merchant_id": 3, "amount": 1.0, "hour": 1, "channel": "web"},
    )
    console.print(f"unknown user -> HTTP {status}: {err.get('error')}")


def drift(triton_url: str, fs: Any) -> str:
    """The drift step (demo/drift_step.py) on a gateway with the payload log on; returns the
    time the log starts at (the report's ``--since``)."""
    from demo import drift_step as d

    LOG.parent.mkdir(exist_ok=True)
    shutil.rmtree(LOG, ignore_errors=True)  # this run's rows only
    console.print(
        "a fresh gateway (its counts start empty; the gate's Locust rows are not like the training "
        "rows), with the payload log on, and an entity without online features (a new user) served "
        "on the nulls training saw rather than refused"
    )
    gateway, gp = start_gateway(triton_url, {"GATEWAY_PAYLOAD_LOG": str(LOG), **d.GATEWAY_ENV})
    since = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    try:
        url = f"http://127.0.0.1:{gp['http']}"
        rows = d.training_rows(fs, d.BASELINE_ROWS, seed=1)
        console.print(
            f"baseline: {len(rows)} rows drawn from the rows the model was fitted on (entity keys, "
            f"amount, hour, channel; a row that had no user snapshot gets a new user), "
            f"{d.BATCH} per request"
        )
        d.send(url, MODEL, rows)
        before = d.Seen.of(d.show_table(console, url, MODEL))
        d.explain_baseline(console, before)
        shifted = d.burst(rows)
        console.print(
            f"\nburst: the same {len(rows)} rows {d.BURST_REPEATS} times over ({len(shifted)} rows) "
            f"with {d.SHIFTED} x{d.FACTOR:g}; every other column's mix is the baseline's"
        )
        d.send(url, MODEL, shifted)
        after = d.Seen.of(d.show_table(console, url, MODEL))
        d.explain_burst(console, before, after)
    finally:
        stop(gateway)  # writes what the payload log still queues
    console.print(f"\npayload log: {LOG} (Parquet, Feast's feature-logging layout)")
    d.write_report(console, str(LOG), since, str(REPO), str(REPORT))
    return since


def shadow(triton_url: str, fs: Any) -> None:
    """The release-on-evidence step (demo/shadow_step.py): the promotion gate's decision is the
    step's outcome, printed; a challenger that fails the criteria is no failure of the demo.
    Then the CRITICAL switch: forged labels collapse the champion's quality, every gateway
    process serves the challenger, and a reset brings the champion back."""
    from demo import shadow_step as s

    shutil.rmtree(SHADOW_LOG, ignore_errors=True)
    for old in STATE.glob(f"{SHADOW_STATE.name}*"):  # this run's evidence only
        old.unlink()
    rule = s.FALLBACK
    console.print(
        f"{s.WORKERS} gateway processes on one port (the kernel spreads connections over them), sharing "
        f"one store ({SHADOW_STATE.relative_to(ROOT)}: predictions awaiting labels, labeled pairs, shadow "
        f"counts, the fallback decision); the CRITICAL switch armed: should the champion's "
        f"{str(rule['metric']).upper()} over the last {rule['window']} of labels fall below "
        f"{rule['threshold']} (at least {rule['min_labels']} labels), every process serves "
        f"{SHADOW_MODEL} instead"
    )
    gateway, gp = start_gateway(triton_url, s.gateway_env(MODEL, str(SHADOW_LOG), str(SHADOW_STATE)))
    url = f"http://127.0.0.1:{gp['http']}"
    try:
        rows, labels = s.held_out_rows(fs, s.ROWS)
        console.print(
            f"{len(rows)} transactions the models never trained on (the newest, which training held "
            f"out), each mirrored to {SHADOW_MODEL} after the champion answered"
        )
        ids = s.send(url, MODEL, rows)
        s.wait_compared(url, MODEL, len(rows))
        s.run_cli(console, "gateway", "shadow", "--url", url, "--model", MODEL, "--window", s.WINDOW)
        console.print(f"\nthe labels arrive (the data generator's is_fraud), by prediction id: {ids[0]}, ...")
        feedback = f"{url}/v1/models/{MODEL}/feedback"
        requests = -(-len(ids) // s.BATCH)
        console.print(
            f"[dim]$ POST {feedback} x{requests} ({s.BATCH} labels each, each its own connection)[/]"
        )
        counts = s.send_labels(url, MODEL, ids, labels)
        s.all_accepted(
            console, counts, len(ids), f"{len(ids)} labels over {requests} requests to either process"
        )
        report = s.quality_once(url, MODEL)
        console.print(
            f"[dim]$ GET {url}/v1/models/{MODEL}/quality?window={s.WINDOW} (twice, each its own "
            f"connection)[/]\nboth reads give the same answer: one truth, whichever process answers"
        )
        s.quality_table(console, report, MODEL)
        roles: dict[str, str] = {}  # the champion's own version comes first
        for v in report["versions"]:
            roles.setdefault(v["role"], str(v["version"]))
        args = [
            "evidence",
            "--criteria",
            "promotion",
            "--gateway",
            url,
            "--model",
            MODEL,
            "--window",
            s.WINDOW,
        ]
        rc = s.run_cli(console, "loadtests", *args)
        decision = {0: "promote the challenger", 6: "keep the champion: the challenger missed the criteria"}
        console.print(
            f"promotion gate (exit {rc}): [bold]{decision.get(rc, 'no decision: see the error above')}[/]"
        )
        collapse(url, rows, labels, roles)
    finally:
        stop(gateway)  # writes what the payload log still queues
    labels_path = STATE / "labels.parquet"
    s.labels_file(str(labels_path), ids, labels)
    console.print(
        f"\nthe offline report: the payload log joined with the first {len(ids)} labels (the true "
        "ones; the forged labels went only to the live gateway)"
    )
    run(
        "gateway",
        "quality",
        "report",
        "--log",
        str(SHADOW_LOG),
        "--labels",
        str(labels_path),
        "--repo",
        str(REPO),
        "--model",
        MODEL,
        "--out",
        str(QUALITY_REPORT),
    )


def collapse(url: str, rows: list[dict[str, Any]], labels: list[int], roles: dict[str, str]) -> None:
    """The CRITICAL switch (docs/quality.md, "The fallback switch"): labels that turn against the
    champion, the switch on every process, and back by command. ``roles``: the champion's and
    the challenger's versions."""
    from demo import shadow_step as s

    champion, challenger = roles["champion"], roles["challenger"]
    console.print(
        f"\n[bold]the label feed turns against the champion[/]: the same {len(rows)} transactions "
        "arrive again (new requests, new prediction ids), and their labels come back as the opposite "
        "of the truth. The demo forges them to make the champion's quality collapse, as a broken "
        "model or a new fraud pattern would"
    )
    ids = s.send(url, MODEL, rows)
    s.wait_compared(url, MODEL, 2 * len(rows))
    counts = s.send_labels(url, MODEL, ids, [1 - y for y in labels])
    s.all_accepted(console, counts, len(ids), f"{len(ids)} forged labels")
    console.print(
        f"[dim]$ GET {url}/v1/models/{MODEL}/fallback (until active; one process judges the rule "
        f"every {s.JUDGE_S:g}s, every process reads the decision every {s.POLL_S:g}s)[/]"
    )
    status, waited = s.wait_fallback(url, MODEL)
    decision = status["decision"]
    when = (
        "already switched when the last forged label went out"
        if waited < 0.1
        else f"switched {waited:.1f}s after the last forged label went out"
    )
    console.print(
        f"the rule broke: {decision['reason']}; every process serves {decision['fallback']} ({when})"
    )
    rc = s.run_cli(console, "gateway", "fallback", "status", MODEL, "--url", url)
    if rc != 3:  # 3: the fallback serves (0: the champion)
        sys.exit(f"demo: `gateway fallback status` exited {rc}, where 3 (the fallback serves) was expected")
    few = rows[:6]
    # the status is the shared store's; each process follows it within its poll (0.5 s)
    versions, _ = s.wait_answered_by(url, MODEL, few, challenger)
    console.print(
        f"{len(few)} predictions for {MODEL}, each its own connection: answered by version(s) "
        f"{', '.join(versions)} ({SHADOW_MODEL} is v{challenger}, the champion v{champion})"
    )
    if set(versions) != {challenger}:
        sys.exit(f"demo: a process still answers with the champion while the fallback is on: {versions}")
    s.run_cli(console, "gateway", "fallback", "reset", MODEL, "--url", url, "--reason", "demo: labels fixed")
    versions, waited = s.wait_answered_by(url, MODEL, few, champion)
    if set(versions) != {champion}:
        sys.exit(f"demo: after the reset, predictions are still answered by version(s) {versions}")
    console.print(
        f"{len(few)} predictions again: answered by version(s) {', '.join(versions)}, the champion, "
        f"{waited:.1f}s after the reset; the rule re-armed on labels that arrive from now on"
    )


def main() -> None:
    import mlflow

    from demo.explain_step import show_reasons
    from support.train import prepare_feature_store, train_and_register

    STATE.mkdir(exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{STATE / 'mlflow.db'}")
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])

    step("1. feature store: generate data, feast apply, materialize (SQLite online store)")
    fs = prepare_feature_store(FEATURES)
    # The gateway's feature specs (docs/feature-reads.md), compiled from Feast's registry once, as
    # the chart's init container does, beside steps 2-4: each gateway below then starts in ~1 s
    # and reads the online store without the Feast SDK (unlike this process, which has it loaded).
    specs = Beside("gateway", "compile-features", "--out", str(SPECS), "--feature-repo", str(FEATURES))
    step("2. train from Feast historical features (point-in-time), register in MLflow")
    experiment = mlflow.get_experiment_by_name("fraud-demo")
    exp_id = (
        experiment.experiment_id
        if experiment
        else mlflow.create_experiment("fraud-demo", artifact_location=(STATE / "artifacts").as_uri())
    )
    trained = train_and_register(fs, MODEL, exp_id)
    console.print(
        f"columns {trained.columns}\ntest AUC {trained.auc:.3f}; registered {MODEL} "
        f"version {trained.version} with alias champion"
    )
    challenger = train_and_register(fs, MODEL, exp_id, n_estimators=5, alias="challenger")
    console.print(
        f"a challenger: 5 rounds of boosting where the champion has 60, test AUC {challenger.auc:.3f}; "
        f"registered {MODEL} version {challenger.version} with alias challenger (shadowed in step 10)"
    )

    # The preprocessing is inside the ONNX graph, so the ensemble is post-only: the run's
    # decision_threshold -> label. Fused (one ONNX model, ~1.05x the bare model's p50 and its
    # throughput, docs/benchmarks.md (e)) rather than steps (1.40x, 0.5x): the demo swaps no
    # step on its own. The gateway calls fraud-detector_ensemble first.
    # --explain: fraud-detector_explain beside it, exact TreeSHAP reason codes on request (step 6).
    # Both exports at once: each is one core's Python for most of its ~9 s. Their output
    # follows in order once both are done.
    step("3. builder export --ensemble fused --explain (ONNX + threshold -> label, parity; the explainer)")
    fused = ("--ensemble", "--ensemble-mode", "fused")
    exports = [
        Beside("builder", "export", f"models:/{MODEL}@champion", "--repo", str(REPO), *fused, "--explain"),
        # Under its own Triton name: an ensemble pins one version, so --keep-serving (a challenger
        # version beside the champion in one model) is for models served without one.
        Beside(
            "builder", "export", f"models:/{MODEL}@challenger", "--repo", str(REPO), "--name", SHADOW_MODEL,
            *fused,
        ),
    ]  # fmt: skip
    exports[0].finish()
    console.print(
        f"served as {MODEL}_ensemble (one ONNX graph: model -> score, label at the run's threshold); "
        f"{MODEL} beside it is the bare model"
    )
    exports[1].finish("run at the same time as the one above")
    step("4. builder validate")
    run("builder", "validate", "--repo", str(REPO))

    step("5. builder serve (real Triton, CPU) and gateway serve")
    tp = {name: free_port(p) for name, p in (("http", 8000), ("grpc", 8001), ("metrics", 8002))}
    triton = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "builder",
            "serve",
            "--repo",
            str(REPO),
            "--address",
            "127.0.0.1",
            "--http-port",
            str(tp["http"]),
            "--grpc-port",
            str(tp["grpc"]),
            "--metrics-port",
            str(tp["metrics"]),
        ]
    )
    gateway = None
    gate_rc = 0
    try:
        wait_for(
            "Triton", lambda: http_status(f"http://127.0.0.1:{tp['http']}/v2/health/ready") == 200, triton
        )
        specs.finish("run beside steps 2-4")
        gateway, gp = start_gateway(f"http://127.0.0.1:{tp['http']}")
        step("6. predictions through the gateway over HTTP and gRPC")
        predictions(f"127.0.0.1:{gp['http']}", f"127.0.0.1:{gp['grpc']}", fs)
        console.print('the top 3 reasons (exact SHAP values, docs/explain.md), asked with "explain": 3')
        show_reasons(f"127.0.0.1:{gp['http']}", fs, MODEL)
        step("7. training-serving skew check")
        run(
            "gateway",
            "skew-check",
            "--model",
            MODEL,
            "--triton-url",
            f"http://127.0.0.1:{tp['http']}",
            "--feature-repo",
            str(FEATURES),
        )
        step("8. release gate: Locust against the gateway, SLA loadtests/sla/demo.yaml")
        reports = STATE / "gate"
        args = [
            "gate",
            "--target",
            f"http://127.0.0.1:{gp['http']}",
            "--sla",
            "demo",
            "--user-class",
            "gateway",
            "--users",
            "8",
            "--spawn-rate",
            "8",
            "--run-time",
            "8s",
            "--model",
            MODEL,
            "--out",
            str(reports),
        ]
        console.print(f"[dim]$ loadtests {' '.join(args)}[/]")
        gate_rc = subprocess.run([sys.executable, "-m", "loadtests", *args]).returncode
        verdict = "PASS" if gate_rc == 0 else f"FAIL (exit {gate_rc})"
        console.print(
            f"gate verdict: {verdict}; reports (summary.json, Locust CSV/HTML, latency.png) in {reports}"
        )
        step("9. drift: traffic like the training rows, then a burst with amount x3")
        # A fresh gateway: this one has counted the gate's Locust rows (random entities, amounts
        # of their own), which would blur the baseline the step shows.
        stop(gateway)
        gateway = None
        since = drift(f"http://127.0.0.1:{tp['http']}", fs)
        step("10. release on evidence: shadow, labels, quality, gate; the CRITICAL fallback")
        shadow(f"http://127.0.0.1:{tp['http']}", fs)
    finally:
        if gateway is not None:
            stop(gateway)
        stop(triton)
    step("done")
    console.print(f"model repository: {REPO}\nregistry: {os.environ['MLFLOW_TRACKING_URI']}")
    print_next_steps(since)
    if gate_rc:
        sys.exit(gate_rc)


def print_next_steps(since: str) -> None:
    """Commands to paste in this shell: ``builder`` finds the runtime ``make`` installed in
    ``.runtime/`` on its own (the project's runtime is the default inside the project)."""
    body = json.dumps({"rows": ROWS[:1]})
    console.print("\n[bold]serve it yourself[/] (three terminals, from the project folder):")
    console.print(
        f"  cd {ROOT} && source .venv/bin/activate\n"
        "  builder serve --repo model_repo --address 127.0.0.1\n"
        f"  gateway serve --triton-url http://127.0.0.1:8000 --feature-repo feature_repo --model {MODEL}\n"
        f"  curl -s http://127.0.0.1:8080/v1/models/{MODEL}/predict "
        f"-H 'content-type: application/json' -d '{body}'\n"
        "  gateway drift --window 1h    # what that gateway has counted (under 500 rows: insufficient)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"\n[bold]both versions' quality[/], labels joined offline to the shadowed log: {QUALITY_REPORT}"
    )
    console.print("\n[bold]the drift report again[/], from the demo's payload log (no server needed):")
    console.print(
        f"  gateway drift report --log {LOG.relative_to(ROOT)} --since {since} "
        f"--repo {REPO.relative_to(ROOT)} --out {REPORT.relative_to(ROOT)}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


if __name__ == "__main__":
    main()
