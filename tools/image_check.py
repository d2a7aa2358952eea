"""The gateway image built and run without a Docker engine: buildah builds the Dockerfile, and the
built image's own entrypoint serves against a real Triton and Feast store started on the host.

    python -m tools.image_check build [--tag T]   # what `make image` runs when no engine answers
    python -m tools.image_check check [--tag T]   # `make image-check`: build, then run and check

The base is the Dockerfile's default (python:3.11.x-slim) when a registry gives it; else a Debian
bookworm root filesystem that mmdebstrap makes from Debian's packages (its python3 is 3.11.2),
imported as ``localhost/bookworm-python:3.11`` and passed as ``--build-arg PYTHON_IMAGE``.
Containers run with ``--isolation chroot`` (no runtime, no network namespace: the host's loopback
is the container's), the one isolation that runs here. Both write the image's CycloneDX SBOM
beside it (build/<image>-<version>.cdx.json, tools/sbom.py) and check it against gateway.lock;
``check`` also needs the project venv for training, export and Triton."""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from support import servers

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
LOCAL_BASE = "localhost/bookworm-python:3.11"
# What the Dockerfile needs of a base: `python` (3.11) with venv, CA certificates for pip, and
# groupadd/useradd (passwd); docs and man pages are left out (SHRINK), as python:slim does.
DEBIAN_PACKAGES = ["python3", "python3-venv", "python-is-python3", "ca-certificates", "passwd"]
DEBIAN_SOURCES = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]
SHRINK = ["path-exclude=/usr/share/doc/*", "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*"]
ISOLATION = ["--isolation", "chroot"]
# pip settings worth carrying into the build; cert and file:// indexes are bind-mounted there.
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "cert", "timeout", "proxy")
BUILD_HOME = "/root"
MAX_IMAGE_MB = 1500  # the venv is ~700 MB (pyarrow, scipy, grpcio, numpy, pandas), the base ~150
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-gcc-12")
MODEL = "fraud-detector"
ROWS: list[dict[str, Any]] = [
    {"user_id": 17, "merchant_id": 3, "amount": 42.5, "hour": 13, "channel": "web"},
    {"user_id": 250, "merchant_id": 88, "amount": 980.0, "hour": 3, "channel": "app"},
    {"user_id": 401, "merchant_id": 12, "amount": 12.0, "hour": 20, "channel": "pos"},
]


class ImageCheckError(RuntimeError):
    """A step could not run (a tool missing, a command failing); the message says which."""


@dataclass
class Report:
    """What `check` prints: each check with its result, the image, and how long each step took."""

    tag: str = ""
    base: str = ""
    size_mb: float = 0.0
    timings_s: dict[str, float] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append({"check": name, "ok": ok, "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings_s[step] = round(time.monotonic() - start, 1)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c["ok"] for c in self.checks)


def sh(*argv: str, capture: bool = True, timeout: float = 1800) -> str:
    """Run a command; its stdout, or ImageCheckError with its output."""
    result = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=capture, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "") if capture else ""
        raise ImageCheckError(f"{' '.join(argv[:3])} ... exited {result.returncode}\n{output[-4000:]}")
    return result.stdout if capture else ""


def require_tools(*tools: str) -> None:
    """Install the Debian packages of missing tools when root (as the Makefile's other targets do)."""
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise ImageCheckError(f"missing {', '.join(missing)}: sudo apt-get install {' '.join(missing)}")
    sh("apt-get", "update", "-qq")
    sh("apt-get", "install", "-y", "-qq", *missing)


def default_base() -> str:
    """The Dockerfile's own ``ARG PYTHON_IMAGE=`` default."""
    found = re.search(r"^ARG PYTHON_IMAGE=(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    if not found:
        raise ImageCheckError("Dockerfile has no `ARG PYTHON_IMAGE=` default")
    return found.group(1)


def image_exists(name: str) -> bool:
    return (
        subprocess.run(["buildah", "inspect", "--type", "image", name], capture_output=True).returncode == 0
    )


def pull(name: str) -> bool:
    """Whether a registry gives ``name`` (Docker Hub for a short name); False at once when none answers."""
    ref = name if "/" in name.split(":")[0] else f"docker.io/library/{name}"
    return (
        subprocess.run(["buildah", "pull", "--quiet", ref], capture_output=True, timeout=900).returncode == 0
    )


def make_local_base(workdir: Path) -> None:
    """A bookworm root filesystem from Debian's packages (mmdebstrap), committed as LOCAL_BASE."""
    require_tools("mmdebstrap")
    tarball = workdir / "bookworm-rootfs.tar"
    dpkg_opts = [f"--dpkgopt={opt}" for opt in SHRINK]
    sh("mmdebstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}", *dpkg_opts,
       "bookworm", str(tarball), *DEBIAN_SOURCES)  # fmt: skip
    ctr = sh("buildah", "from", "scratch").strip()
    try:
        sh("buildah", "add", "--quiet", ctr, str(tarball), "/")
        path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        sh("buildah", "config", "--env", path, "--env", "LANG=C.UTF-8", "--cmd", "python3", ctr)
        sh("buildah", "commit", "--quiet", ctr, LOCAL_BASE)
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)
        tarball.unlink(missing_ok=True)


def choose_base(workdir: Path, report: Report) -> str:
    """The Dockerfile's default base if present or pullable, else the local bookworm one."""
    wanted = default_base()
    if image_exists(wanted) or pull(wanted):
        return wanted
    print(f"no registry gives {wanted}: building on {LOCAL_BASE} (Debian bookworm, python3 3.11.2)")
    if not image_exists(LOCAL_BASE):
        with report.timed("mmdebstrap_base"):
            make_local_base(workdir)
    return LOCAL_BASE


def host_pip_config() -> dict[str, str]:
    """pip's settings on this machine (its config files, then PIP_* variables), for PIP_KEYS."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    found: dict[str, str] = {}
    for line in listed.splitlines():  # global.cert='/etc/ssl/...'
        key, _, value = line.partition("=")
        section, _, name = key.partition(".")
        if name in PIP_KEYS and section in ("global", "install"):
            found[name] = value.strip().strip("'\"")
    for name in PIP_KEYS:
        from_env = os.environ.get("PIP_" + name.upper().replace("-", "_"))
        if from_env:
            found[name] = from_env
    return found


def pip_mounts(workdir: Path) -> list[str]:
    """`-v` options that give the build's RUN steps this machine's pip settings: a pip.conf, the
    CA bundle pip trusts here (a TLS-inspecting proxy's CA, say), and local (file://) indexes.
    All of it in one folder mounted over /root, which every base has: pip reads root's user
    config there, and a mount on a path the image already has leaves nothing behind, where a
    new mount point (/etc/pip.conf) would stay in the final image as an empty file."""
    settings = host_pip_config()
    home = workdir / "pip-home"
    (home / ".config/pip").mkdir(parents=True)
    mounts = ["-v", f"{home}:{BUILD_HOME}"]
    cert = settings.pop("cert", "") or os.environ.get("SSL_CERT_FILE", "")
    if cert and Path(cert).is_file():
        shutil.copyfile(cert, home / "ca.crt")
        settings["cert"] = f"{BUILD_HOME}/ca.crt"
    mirrors = 0
    for key in ("index-url", "extra-index-url", "find-links"):
        kept = []
        for location in settings.pop(key, "").split():
            local = Path(location.removeprefix("file://"))
            if location.startswith(("http://", "https://")):
                kept.append(location)
            elif local.is_dir():  # a PEP 503 tree links ../../files: mount the folder above simple/
                top = local.parent if local.name == "simple" else local
                inside = f"{BUILD_HOME}/mirror-{mirrors}"
                (home / f"mirror-{mirrors}").mkdir()
                mounts += ["-v", f"{top}:{inside}:ro"]
                kept.append(location.replace(str(top), inside))
                mirrors += 1
        if kept:
            settings[key] = " ".join(kept)
    conf = configparser.ConfigParser(interpolation=None)  # URLs may hold %-escapes
    conf["global"] = settings
    with (home / ".config/pip/pip.conf").open("w") as out:
        conf.write(out)
    return mounts


def build(tag: str, workdir: Path, report: Report) -> None:
    """buildah bud of the Dockerfile (docker format, so HEALTHCHECK is kept) on the chosen base."""
    if os.geteuid() != 0:  # chroot isolation and `buildah mount` need root, or its user namespace
        raise ImageCheckError("run as root, or inside `buildah unshare` (rootless buildah)")
    require_tools("buildah")
    report.tag = tag
    report.base = choose_base(workdir, report)
    with report.timed("build"):
        sh("buildah", "bud", *ISOLATION, "--layers", "--format", "docker", "--pull=never",
           "--build-arg", f"PYTHON_IMAGE={report.base}", *pip_mounts(workdir),
           "-t", tag, "-f", str(DOCKERFILE), str(REPO), capture=False)  # fmt: skip
    report.size_mb = image_size_mb(tag)
    print(f"built {tag} on {report.base}: {report.size_mb:.0f} MB in {report.timings_s['build']:.0f} s")


def image_size_mb(tag: str) -> float:
    """The image's unpacked size: the sum of its layers' sizes as containers/storage records them."""
    layers = json.loads(sh("buildah", "inspect", "--type", "image", tag))["OCIv1"]["rootfs"]["diff_ids"]
    info = json.loads(sh("buildah", "info"))["store"]
    store = Path(info["GraphRoot"]) / f"{info['GraphDriverName']}-layers/layers.json"
    sizes = {rec.get("diff-digest"): rec.get("diff-size", 0) for rec in json.loads(store.read_text())}
    return sum(sizes.get(d, 0) for d in layers) / 1e6


def image_config(tag: str) -> dict[str, Any]:
    """The Docker-format config (Entrypoint, Cmd, User, Env, WorkingDir, Healthcheck)."""
    return dict(json.loads(sh("buildah", "inspect", "--type", "image", tag))["Docker"]["config"])


# --- running the image ----------------------------------------------------------------------


@dataclass
class Running:
    """The image's entrypoint running in a buildah working container, on the host's network."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path


@contextmanager
def working_container(tag: str) -> Iterator[tuple[str, Path]]:
    """A working container of ``tag`` and its mounted root filesystem, removed on exit."""
    ctr = sh("buildah", "from", "--pull=never", tag).strip()
    try:
        yield ctr, Path(sh("buildah", "mount", ctr).strip())
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)


def run_argv(ctr: str, config: dict[str, Any], env: dict[str, str], *command: str) -> list[str]:
    """`buildah run` as the image's USER in its WORKDIR, with ``env`` over the image's ENV."""
    flags = [f"--env={k}={v}" for k, v in env.items()]
    user, workdir = config.get("User") or "0", config.get("WorkingDir") or "/"
    return [
        "buildah",
        "run",
        *ISOLATION,
        "--user",
        user,
        "--workingdir",
        workdir,
        *flags,
        ctr,
        "--",
        *command,
    ]


@contextmanager
def container_gateway(
    ctr: str, config: dict[str, Any], env: dict[str, str], workdir: Path
) -> Iterator[Running]:
    """ENTRYPOINT + CMD from the image config, until /readyz answers 200; stopped with SIGINT."""
    argv = run_argv(ctr, config, env, *(config.get("Entrypoint") or []), *(config.get("Cmd") or []))
    log = workdir / "container-gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    running = Running(f"http://127.0.0.1:{env['GATEWAY_PORT']}", proc, log)
    try:
        deadline = time.monotonic() + 120
        while ready_status(running.url) != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ImageCheckError(f"the image's gateway is not ready:\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
        yield running
    finally:
        # buildah run passes no signal on (chroot isolation): SIGINT to what runs inside
        for pid in container_processes(proc.pid):
            os.kill(pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            for pid in container_processes(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.wait()


def ready_status(url: str) -> int | None:
    try:
        return servers.http_status(url + "/readyz", timeout=2)
    except OSError:  # not listening yet
        return None


def container_processes(run_pid: int) -> list[int]:
    """What runs inside: the descendants of a `buildah run` that are not buildah's own helpers
    (buildah-chroot-runtime, buildah-chroot-exec). Chroot isolation shares the PID namespace."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # "pid (comm) state ppid ..."
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [run_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            try:
                argv0 = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if not Path(argv0.decode(errors="replace")).name.startswith("buildah"):
                found.append(child)
    return found


def process_ids(pid: int) -> tuple[list[int], list[int]]:
    """(real, effective, saved, fs) uids and gids from /proc/<pid>/status."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return [int(x) for x in fields["Uid"].split()], [int(x) for x in fields["Gid"].split()]


@contextmanager
def host_stack(workdir: Path) -> Iterator[tuple[Path, str]]:
    """As tests/gateway/conftest.py builds it: a feature repo copy with generated data, a model
    trained from it and registered (SQLite MLflow), exported, served by the embedded Triton.
    Yields the prepared feature repo and Triton's HTTP URL."""
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri  # the export reads the registry through it
    import mlflow

    from builder.export import ExportRequest, export_model
    from builder.runtime.install import install_runtime
    from builder.runtime.paths import default_runtime_dir
    from support.train import prepare_feature_store, train_and_register

    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment("image-check", artifact_location=str(workdir / "artifacts"))
    repo = workdir / "feature_repo"
    shutil.copytree(REPO / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    store = prepare_feature_store(repo)
    train_and_register(store, MODEL, experiment, n_estimators=20)
    export_model(ExportRequest(f"models:/{MODEL}@champion", workdir / "model_repo"))
    runtime = install_runtime(default_runtime_dir(REPO), log=print)
    with servers.serving(workdir / "model_repo", runtime, workdir / "tritonserver.log") as triton:
        yield repo, f"http://{triton.http_url}"


def predict(url: str) -> dict[str, Any]:
    """ROWS through a gateway's HTTP predict; the answer without its per-request ids."""
    import requests

    response = requests.post(f"{url}/v1/models/{MODEL}/predict", json={"rows": ROWS}, timeout=30)
    response.raise_for_status()
    body = dict(response.json())
    return {
        "model": body["model"],
        "version": body["version"],
        "predictions": [{k: v for k, v in p.items() if k != "id"} for p in body["predictions"]],
    }


def check_filesystem(rootfs: Path, report: Report) -> None:
    """No compiler and no pip cache (nor the build's pip settings) in the final image."""
    bins = [rootfs / d for d in ("usr/bin", "usr/local/bin", "bin", "opt/venv/bin")]
    compilers = [str(b / c) for b in bins for c in COMPILERS if (b / c).exists()]
    report.add("no compiler", not compilers, ", ".join(compilers) or f"none of {', '.join(COMPILERS)}")
    caches = [rootfs / "root/.cache", *rootfs.glob("home/*/.cache"), *rootfs.glob("**/.cache/pip")]
    leftovers = [rootfs / "etc/pip.conf", rootfs / "root/.config/pip", *rootfs.glob("root/mirror-*")]
    found = [str(p.relative_to(rootfs)) for p in [*caches, *leftovers] if p.exists()]
    report.add("no pip cache or build config", not found, ", ".join(found) or "no ~/.cache, no .cache/pip")


def check_running(tag: str, workdir: Path, report: Report) -> None:
    """The image's entrypoint against a host Triton + Feast store, beside the source tree's gateway."""
    config = image_config(tag)
    start = time.monotonic()
    with host_stack(workdir) as (repo, triton_url):
        report.timings_s["host_stack"] = round(time.monotonic() - start, 1)
        pass_env = {"GATEWAY_TRITON_URL": triton_url, "GATEWAY_MODELS": f'["{MODEL}"]'}
        env = {
            **pass_env,
            "GATEWAY_PORT": str(servers.free_port()),
            "GATEWAY_GRPC_PORT": str(servers.free_port()),
        }
        with report.timed("run_checks"), working_container(tag) as (ctr, rootfs):
            check_filesystem(rootfs, report)
            # the generated store, into the container's own layer (.dockerignore keeps it out of the
            # image), owned by the image's user
            data = Path(shutil.copytree(repo / "data", rootfs / "app/feature_repo/data"))
            for path in [data, *data.rglob("*")]:
                os.chown(path, 10001, 10001)
            source_env = {**pass_env, "GATEWAY_FEATURE_REPO": str(repo)}
            with (
                container_gateway(ctr, config, env, workdir) as image_gw,
                servers.gateway_process(workdir, source_env) as source_gw,
            ):
                report.add("/readyz", True, f"200 from the image's gateway at {image_gw.url}")
                check_process(image_gw, report)
                check_healthcheck(ctr, config, env, report)
                image_answer, source_answer = predict(image_gw.url), predict(source_gw.url)
                same = image_answer == source_answer
                scores = [p["score"] for p in image_answer["predictions"]]
                report.add("prediction equals the source tree's", same, f"scores {scores}" if same else
                           f"image {image_answer} != source {source_answer}")  # fmt: skip


def check_sbom(tag: str, report: Report) -> None:
    """Write the image's SBOM beside it (build/<image>-<version>.cdx.json) and check that it lists
    every gateway.lock pin at its version and nothing else but pip, setuptools (the base's venv)
    and the project itself."""
    from tools.locks import REQUIREMENTS, Lock
    from tools.sbom import SbomError, default_out, write_sbom

    out = default_out(tag)
    try:
        packages = write_sbom(tag, out)
    except SbomError as exc:
        report.add("SBOM", False, str(exc))
        return
    found = {p.key: p.version for p in packages}
    required: dict[str, str] = {}
    optional: dict[str, str] = {}
    for pin in Lock.read(REQUIREMENTS / "gateway.lock").pins:
        name, _, version = pin.split(" ;", 1)[0].partition("==")
        (optional if ";" in pin else required)[canonicalize(name)] = version
    wrong = {n: (v, found.get(n, "missing")) for n, v in required.items() if found.get(n) != v}
    wrong |= {n: (v, found[n]) for n, v in optional.items() if n in found and found[n] != v}
    extra = sorted(set(found) - set(required) - set(optional) - {"pip", "setuptools", "triton-stack"})
    ok = not wrong and not extra
    detail = f"{len(packages)} packages, CycloneDX 1.6 JSON (schema-valid) in {out.relative_to(REPO)}"
    if not ok:
        detail += f"; differ (locked, found) {wrong}; not locked {extra}"
    report.add("SBOM lists the locked packages", ok, detail)


def canonicalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_process(gw: Running, report: Report) -> None:
    """Every process inside (the entrypoint and any it starts) has uid and gid 10001, all four
    of each (real, effective, saved, filesystem), as /proc/<pid>/status says."""
    ids = {pid: process_ids(pid) for pid in container_processes(gw.proc.pid)}
    ok = bool(ids) and all(set(u) == {10001} and set(g) == {10001} for u, g in ids.values())
    argv = {
        pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip() for pid in ids
    }
    detail = "; ".join(f"pid {p} ({argv[p]}): Uid {u} Gid {g}" for p, (u, g) in ids.items())
    report.add("runs as 10001:10001", ok, detail or "no process found inside")


def check_healthcheck(ctr: str, config: dict[str, Any], env: dict[str, str], report: Report) -> None:
    """The image's HEALTHCHECK command, run inside; and against a closed port, where it must fail."""
    test = (config.get("Healthcheck") or {}).get("Test") or []
    if test[:1] != ["CMD"]:
        report.add("HEALTHCHECK", False, f"no exec-form HEALTHCHECK in the image config: {test}")
        return
    run = subprocess.run(run_argv(ctr, config, env, *test[1:]), capture_output=True, text=True, timeout=60)
    closed = {**env, "GATEWAY_PORT": str(servers.free_port())}
    down = subprocess.run(run_argv(ctr, config, closed, *test[1:]), capture_output=True, timeout=60)
    ok = run.returncode == 0 and down.returncode != 0
    report.add("HEALTHCHECK", ok, f"exit {run.returncode} on the gateway, {down.returncode} on a closed port"
               + ("" if ok else f": {run.stderr[-500:]}"))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = Report()
    workdir = Path(tempfile.mkdtemp(prefix="image-check-"))
    try:
        with report.timed("total"):
            build(args.tag, workdir, report)
            bounded = report.size_mb <= args.max_size_mb
            report.add("image size", bounded, f"{report.size_mb:.0f} MB (bound {args.max_size_mb:g} MB)")
            check_sbom(args.tag, report)
            if args.command == "check":
                check_running(args.tag, workdir, report)
    except (ImageCheckError, servers.ServerStartError, subprocess.TimeoutExpired, OSError) as exc:
        report.add("error", False, str(exc))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_report(report, args.json)
    return 0 if report.ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.image_check", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--tag", default="triton-stack/gateway:dev")
    parser.add_argument("--max-size-mb", type=float, default=MAX_IMAGE_MB)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(report), indent=2))
        return
    print(f"\nimage {report.tag} on {report.base}: {report.size_mb:.0f} MB")
    print("timings (s): " + ", ".join(f"{k} {v:g}" for k, v in report.timings_s.items()))
    passed = sum(c["ok"] for c in report.checks)
    print(f"checks: {passed}/{len(report.checks)} passed")


if __name__ == "__main__":
    sys.exit(main())
