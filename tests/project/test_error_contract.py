"""Every command's refusals keep the contract of docs/errors.md (issue 18, part 6): a documented exit code
(never 0, never a traceback), exactly one ``error:`` line and a ``hint:`` line; ``--help`` at
80 columns names every option in full; a refusal leaves no files behind where the user did
not ask for them. The installed commands are run as a user runs them, each in a second or two;
only the `builder serve` cases start the embedded Triton (and it fails or stops at once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
RUNTIME = Path(os.environ.get("BUILDER_RUNTIME_DIR") or ROOT / ".runtime")


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "COLUMNS": "80", "TERM": "dumb", **env}
    environ.pop("GATEWAY_PAYLOAD_LOG", None)
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]], cwd=cwd, env=environ, capture_output=True, text=True, timeout=60
    )


def assert_refusal(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == code, text
    assert "Traceback" not in text, text
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    hints = [ln for ln in proc.stderr.splitlines() if ln.startswith("hint:")]
    assert len(errors) == 1, text
    assert len(hints) == 1, text
    for word in words:
        assert word in errors[0] + hints[0], text
    return errors[0]


FEATURE_REPO = Path(__file__).resolve().parents[2] / "feature_repo"
CASES: list[tuple[str, list[str], int, tuple[str, ...]]] = [
    # builder
    ("validate missing folder", ["builder", "validate", "--repo", "nope"], 7, ("--repo",)),
    ("validate no --repo", ["builder", "validate"], 2, ("--repo",)),
    (
        "export csv reference",
        ["builder", "export", "models:/m@a", "--repo", "out", "--reference", "rows.csv"],
        2,
        ("rows.csv", "Parquet"),
    ),
    (
        "export missing reference",
        ["builder", "export", "models:/m@a", "--repo", "out", "--reference", "x.parquet"],
        2,
        ("x.parquet",),
    ),
    (
        "export missing spec",
        ["builder", "export", "models:/m@a", "--repo", "out", "--ensemble-spec", "e.json"],
        2,
        ("e.json",),
    ),
    ("export no uri", ["builder", "export", "--repo", "out"], 2, ("model_uri",)),
    (
        "export bad int",
        ["builder", "export", "models:/m@a", "--repo", "out", "--max-batch-size", "x"],
        2,
        ("--max-batch-size",),
    ),
    (
        "export bad format",
        ["builder", "export", "models:/m@a", "--repo", "out", "--format", "pt"],
        2,
        ("pt",),
    ),
    ("serve missing repo", ["builder", "serve", "--repo", "nope"], 6, ("nope",)),
    (
        "serve --load-model nope",
        ["builder", "serve", "--repo", "repo", "--model-control-mode", "explicit", "--load-model", "nope"],
        6,
        ("nope", "good"),
    ),
    (
        "serve bad mode",
        ["builder", "serve", "--repo", "repo", "--model-control-mode", "sometimes"],
        2,
        ("sometimes",),
    ),
    ("tune no uri", ["builder", "tune"], 2, ()),
    ("unknown command", ["builder", "nosuch"], 2, ("nosuch",)),
    ("release no args", ["builder", "release", "promote", "--bogus"], 2, ("--bogus",)),
    # gateway
    ("drift unreachable", ["gateway", "drift", "--url", "http://127.0.0.1:9"], 1, ("unreachable", "--url")),
    ("drift report no log", ["gateway", "drift", "report"], 2, ("--log",)),
    ("drift report missing log", ["gateway", "drift", "report", "--log", "nolog"], 1, ("nolog",)),
    (
        "drift report bad since",
        ["gateway", "drift", "report", "--log", "nolog", "--since", "soon"],
        2,
        ("soon",),
    ),
    (
        "skew-check as the README",
        [
            "gateway",
            "skew-check",
            "--model",
            "fraud-detector",
            "--sample",
            "50",
            "--triton-url",
            "http://127.0.0.1:9",
            "--feature-repo",
            str(FEATURE_REPO),  # the README runs it from the project's root
        ],
        1,
        ("unreachable", "--triton-url"),
    ),
    ("serve bad port", ["gateway", "serve", "--port", "x"], 2, ("--port",)),
    (
        "quality report missing labels file",
        [
            "gateway",
            "quality",
            "report",
            "--log",
            "nolog",
            "--labels",
            "labels.parquet",
            "--repo",
            "repo",
            "--model",
            "fraud-detector",
        ],
        2,
        ("labels.parquet", "prediction_id,label", ".demo/labels.parquet"),
    ),
    (
        "fallback status unreachable",
        ["gateway", "fallback", "status", "fraud-detector", "--url", "http://127.0.0.1:9"],
        1,
        ("cannot reach", "--url"),
    ),
    (
        "serve missing feature repo",
        ["gateway", "serve", "--feature-repo", "no-such-repo", "--port", "0"],
        2,
        ("no-such-repo", "--feature-repo"),
    ),
    (
        "skew-check missing feature repo",
        ["gateway", "skew-check", "--feature-repo", "no-such-repo"],
        2,
        ("no-such-repo", "--feature-repo"),
    ),
    # loadtests
    ("gate no sla", ["loadtests", "gate", "--target", "http://127.0.0.1:9"], 2, ("--sla",)),
    (
        "gate missing sla",
        ["loadtests", "gate", "--target", "http://127.0.0.1:9", "--sla", "nope.yaml"],
        3,
        ("nope.yaml",),
    ),
    (
        "gate bad users",
        ["loadtests", "gate", "--target", "http://127.0.0.1:9", "--sla", "demo", "--users", "0"],
        2,
        ("--users",),
    ),
    (
        "gate bad run time",
        ["loadtests", "gate", "--target", "http://127.0.0.1:9", "--sla", "demo", "--run-time", "soon"],
        2,
        ("soon",),
    ),
    (
        "gate target down",
        ["loadtests", "gate", "--target", "http://127.0.0.1:9", "--sla", "demo"],
        4,
        ("127.0.0.1:9",),
    ),
]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n")
    (tmp_path / "repo" / "good").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize(("args", "code", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusal_is_one_error_and_one_hint(
    workdir: Path, args: list[str], code: int, words: tuple[str, ...]
) -> None:
    started = time.monotonic()
    proc = run(args, workdir, TMPDIR=str(workdir))
    assert_refusal(proc, code, *words)
    assert time.monotonic() - started < 30, "a refusal must come before any slow work"
    # nothing written where the user did not ask: no report folder, no temp log, no repo
    left = sorted(p.name for p in workdir.iterdir())
    assert left == ["repo", "rows.csv"], left


def _commands() -> list[list[str]]:
    from builder.cli.main import _register_commands
    from builder.cli.main import app as builder_app
    from gateway.cli import app as gateway_app
    from loadtests.cli import app as loadtests_app

    _register_commands()
    paths: list[list[str]] = []

    def walk(command: typer.core.TyperGroup | typer.core.TyperCommand, path: list[str]) -> None:
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    for prog, typer_app in (("builder", builder_app), ("gateway", gateway_app), ("loadtests", loadtests_app)):
        walk(typer.main.get_command(typer_app), [prog])  # type: ignore[arg-type]
    return paths


def test_help_at_80_columns_names_every_option_in_full(tmp_path: Path) -> None:
    from builder.cli.main import _register_commands
    from builder.cli.main import app as builder_app
    from gateway.cli import app as gateway_app
    from loadtests.cli import app as loadtests_app

    _register_commands()
    apps = {"builder": builder_app, "gateway": gateway_app, "loadtests": loadtests_app}
    checked = 0
    for path in _commands():
        command = typer.main.get_command(apps[path[0]])
        for name in path[1:]:
            command = command.commands[name]  # type: ignore[attr-defined]
        proc = run([*path, "--help"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "…" not in proc.stdout, proc.stdout
        lines = proc.stdout.splitlines()
        assert all(len(line) <= 80 for line in lines), proc.stdout
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts]:
                if opt.startswith("-"):
                    assert opt in proc.stdout, f"{' '.join(path)} --help: {opt} missing\n{proc.stdout}"
                    checked += 1
    assert checked > 50


def _runtime_or_skip() -> None:
    if not (RUNTIME / "install-stamp.json").exists():
        pytest.skip(f"no embedded Triton runtime at {RUNTIME}")


def test_serve_failure_names_the_model_and_keeps_its_log(tmp_path: Path) -> None:
    _runtime_or_skip()
    (tmp_path / "repo" / "broken").mkdir(parents=True)
    (tmp_path / "repo" / "broken" / "config.pbtxt").write_text('platform: "nonsense"\n')
    proc = run(
        ["builder", "serve", "--repo", "repo", *_free_ports()],
        tmp_path,
        TMPDIR=str(tmp_path),
        BUILDER_RUNTIME_DIR=str(RUNTIME),
    )
    error = assert_refusal(proc, 8, "broken")
    logs = list(tmp_path.glob("tritonserver-*.log"))
    assert len(logs) == 1, error
    assert str(logs[0]) in proc.stderr.splitlines()[-1]  # the hint names the kept log


def _free_ports() -> list[str]:
    import socket

    ports = []
    socks = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(str(s.getsockname()[1]))
    for s in socks:
        s.close()
    return [
        "--address",
        "127.0.0.1",
        "--http-port",
        ports[0],
        "--grpc-port",
        ports[1],
        "--metrics-port",
        ports[2],
    ]


def test_serve_clean_exit_leaves_no_log(tmp_path: Path) -> None:
    _runtime_or_skip()
    (tmp_path / "repo").mkdir()
    environ = {**os.environ, "TMPDIR": str(tmp_path), "BUILDER_RUNTIME_DIR": str(RUNTIME)}
    proc = subprocess.Popen(
        [str(BIN / "builder"), "serve", "--repo", "repo", *_free_ports()],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if "Ctrl-C to stop" in line:
                break
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert not list(tmp_path.glob("tritonserver-*.log"))


def test_serve_refuses_a_grpc_url_on_an_http_port(tmp_path: Path) -> None:
    """``--triton-url host:8000`` (no scheme: gRPC) at Triton's HTTP port was accepted, then
    every request was a 503: the port answering HTTP is refused at start, naming http://."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        args = [
            "gateway",
            "serve",
            "--triton-url",
            address,
            "--feature-repo",
            str(FEATURE_REPO),
            "--port",
            "0",
        ]
        proc = run(args, tmp_path)
        assert_refusal(proc, 2, "answers HTTP", f"http://{address}")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("flag", ["--port", "--grpc-port"])
def test_serve_refuses_a_port_another_process_holds(tmp_path: Path, flag: str) -> None:
    """A busy HTTP port was uvicorn's bare errno line (exit 3), and a busy gRPC port was joined
    silently (SO_REUSEPORT), splitting another gateway's traffic: both are one refusal, exit 2."""
    import socket

    from support.servers import free_port

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        ports = {"--port": str(free_port()), "--grpc-port": str(free_port()), flag: str(busy)}
        args = ["gateway", "serve", "--feature-repo", str(FEATURE_REPO)]
        args += [x for item in ports.items() for x in item]
        proc = run(args, tmp_path)
        assert_refusal(proc, 2, f"127.0.0.1:{busy}", f"({flag}) is in use", f"another {flag}")
