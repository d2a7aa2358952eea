"""The gateway's images built and run without a Docker engine: buildah builds the Dockerfile's two
targets, the serving image (the default) and the full one (``--target full``, with Feast), and the
serving image's own entrypoint serves, from feature specs the full image compiled, against a real
Triton and Feast store started on the host.

    python -m tools.image_check build [--tag T]   # what `make image` runs when no engine answers
    python -m tools.image_check check [--tag T]   # `make image-check`: build, then run and check

``--tag`` names the serving image (triton-stack/gateway:dev); the full one is its ``-full``
sibling (triton-stack/gateway-full:dev). The base is the Dockerfile's default (python:3.11.x-slim)
when a registry gives it; else a Debian bookworm root filesystem that mmdebstrap makes from Debian's
packages (its python3 is 3.11.2), trimmed as Debian's slim images are, imported as
``localhost/bookworm-python:3.11-<recipe>`` and passed as ``--build-arg PYTHON_IMAGE``. Containers
run with ``--isolation chroot`` (no runtime, no network namespace: the host's loopback is the
container's), the one isolation that runs here. Both write each image's CycloneDX SBOM beside it
(build/<image>-<version>.cdx.json, tools/sbom.py) and check it against its locks; ``check`` also
needs the project venv for training, export and Triton."""

from __future__ import annotations

import argparse
import configparser
import hashlib
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
# What the Dockerfile needs of a base: `python` (3.11) with venv, CA certificates for pip, and
# groupadd/useradd (passwd). Trimmed as Debian's own slim images are (debuerreotype's slimify):
# no docs, man pages or translations (SHRINK); and /usr merged by mmdebstrap's hook rather than
# by the usrmerge package, which would pull in perl (~46 MB). 128 MB, python:slim's size.
DEBIAN_PACKAGES = ["python3", "python3-venv", "python-is-python3", "ca-certificates", "passwd"]
DEBIAN_SOURCES = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]
SHRINK = [
    f"path-exclude=/usr/share/{folder}/*" for folder in ("doc", "man", "info", "locale", "groff", "lintian")
]
MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/merged-usr"
# The base is named after its recipe, so a changed recipe builds a new one instead of reusing
# an older base of the same name.
_RECIPE = json.dumps([DEBIAN_PACKAGES, DEBIAN_SOURCES, SHRINK, MERGED_USR_HOOK]).encode()
LOCAL_BASE = f"localhost/bookworm-python:3.11-{hashlib.sha256(_RECIPE).hexdigest()[:8]}"
ISOLATION = ["--isolation", "chroot"]
# pip settings worth carrying into the build; cert and file:// indexes are bind-mounted there.
PIP_KEYS = ("index-url", "extra-index-url", "find-links", "trusted-host", "cert", "timeout", "proxy")
BUILD_HOME = "/root"
# Issue 33: the serving image at most 300 MB (its venv ~140 MB, the base ~130); the full one
# carries Feast's closure (pyarrow, pandas, scipy, SQLAlchemy, dask: a ~600 MB venv).
MAX_IMAGE_MB = 300
MAX_FULL_IMAGE_MB = 1000
# What the serving image must not hold: Feast and the closure only the full image needs.
FULL_ONLY = ("feast", "pandas", "pyarrow", "sqlalchemy", "dask", "scipy")
SPECS = "/specs"  # where the chart's emptyDir of compiled specs is mounted (GATEWAY_FEATURE_SPECS)
CHART_VALUES = REPO / "helm" / "triton-stack" / "values.yaml"
WARM_REQUESTS = 300  # predictions before the serving gateway's resident memory is read
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
    full_tag: str = ""
    base: str = ""
    size_mb: float = 0.0
    full_size_mb: float = 0.0
    rss_mib: float = 0.0
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
       f"--hook-dir={MERGED_USR_HOOK}", "bookworm", str(tarball), *DEBIAN_SOURCES)  # fmt: skip
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


def full_tag_of(tag: str) -> str:
    """The full image's tag beside the serving image's: triton-stack/gateway:0.1.0 ->
    triton-stack/gateway-full:0.1.0 (a registry's host:port is left as it is)."""
    name, colon, version = tag.rpartition(":")
    if not colon or "/" in version:  # no tag: a bare name (or a registry port before the path)
        return f"{tag}-full"
    return f"{name}-full:{version}"


def build(tag: str, workdir: Path, report: Report) -> None:
    """buildah bud of the Dockerfile's two targets (docker format, so HEALTHCHECK is kept) on the
    chosen base: the full image, then the serving one; --layers caches the stages they share."""
    if os.geteuid() != 0:  # chroot isolation and `buildah mount` need root, or its user namespace
        raise ImageCheckError("run as root, or inside `buildah unshare` (rootless buildah)")
    require_tools("buildah")
    report.tag, report.full_tag = tag, full_tag_of(tag)
    report.base = choose_base(workdir, report)
    mounts = pip_mounts(workdir)
    for step, target, name in (("build_full", ["--target", "full"], report.full_tag), ("build", [], tag)):
        with report.timed(step):
            sh("buildah", "bud", *ISOLATION, "--layers", "--format", "docker", "--pull=never",
               "--build-arg", f"PYTHON_IMAGE={report.base}", *mounts, *target,
               "-t", name, "-f", str(DOCKERFILE), str(REPO), capture=False)  # fmt: skip
    report.size_mb, report.full_size_mb = image_size_mb(tag), image_size_mb(report.full_tag)
    print(
        f"built {tag} ({report.size_mb:.0f} MB) and {report.full_tag} ({report.full_size_mb:.0f} MB) "
        f"on {report.base} in {report.timings_s['build_full'] + report.timings_s['build']:.0f} s"
    )


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


def run_argv(
    ctr: str, config: dict[str, Any], env: dict[str, str], *command: str, volumes: tuple[str, ...] = ()
) -> list[str]:
    """`buildah run` as the image's USER in its WORKDIR, with ``env`` over the image's ENV and
    ``volumes`` (host:container[:options]) bind-mounted, as a pod's volumes are."""
    flags = [f"--env={k}={v}" for k, v in env.items()] + [f"--volume={v}" for v in volumes]
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
    ctr: str, config: dict[str, Any], env: dict[str, str], workdir: Path, volumes: tuple[str, ...] = ()
) -> Iterator[Running]:
    """ENTRYPOINT + CMD from the image config, until /readyz answers 200; stopped with SIGINT."""
    entry = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    argv = run_argv(ctr, config, env, *entry, volumes=volumes)
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


def proc_status(pid: int) -> dict[str, str]:
    """/proc/<pid>/status as a mapping (Uid, Gid, VmRSS, ...)."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def process_ids(pid: int) -> tuple[list[int], list[int]]:
    """(real, effective, saved, fs) uids and gids from /proc/<pid>/status."""
    fields = proc_status(pid)
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


def predict(url: str, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """ROWS (or ``rows``) through a gateway's HTTP predict; the answer without its per-request ids."""
    import requests

    response = requests.post(f"{url}/v1/models/{MODEL}/predict", json={"rows": rows or ROWS}, timeout=30)
    response.raise_for_status()
    body = dict(response.json())
    return {
        "model": body["model"],
        "version": body["version"],
        "predictions": [{k: v for k, v in p.items() if k != "id"} for p in body["predictions"]],
    }


def check_filesystem(rootfs: Path, report: Report, image: str) -> None:
    """No compiler and no pip cache (nor the build's pip settings) in ``image``'s filesystem."""
    bins = [rootfs / d for d in ("usr/bin", "usr/local/bin", "bin", "opt/venv/bin")]
    compilers = [str(b / c) for b in bins for c in COMPILERS if (b / c).exists()]
    found = ", ".join(compilers) or f"none of {', '.join(COMPILERS)}"
    report.add(f"no compiler ({image})", not compilers, found)
    caches = [rootfs / "root/.cache", *rootfs.glob("home/*/.cache"), *rootfs.glob("**/.cache/pip")]
    leftovers = [rootfs / "etc/pip.conf", rootfs / "root/.config/pip", *rootfs.glob("root/mirror-*")]
    found = ", ".join(str(p.relative_to(rootfs)) for p in [*caches, *leftovers] if p.exists())
    report.add(f"no pip cache or build config ({image})", not found, found or "no ~/.cache, no .cache/pip")


def check_no_feast_closure(rootfs: Path, report: Report) -> None:
    """The serving image's venv holds none of the packages only the full image needs."""
    held = sorted({p.name.lower() for p in rootfs.glob("opt/venv/lib/python3*/site-packages/*")})
    found = [name for name in FULL_ONLY if name in held]
    detail = ", ".join(found) or f"none of {', '.join(FULL_ONLY)} in /opt/venv"
    report.add("no Feast closure in the serving image", not found, detail)


# Runs its arguments as a command, then prints the command's peak resident memory (KiB) last on
# stderr: the images have no /usr/bin/time.
PEAK_RSS = (
    "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(done.returncode)"
)


def compile_specs(full_tag: str, data: Path, specs: Path, report: Report) -> None:
    """The chart's init container: `gateway compile-features --out /specs` in the full image, on
    the host's generated store mounted at the image's feature_repo/data, into ``specs``; its peak
    resident memory within the chart's limit for the init containers."""
    config = image_config(full_tag)
    repo = dict(e.split("=", 1) for e in config.get("Env") or [])["GATEWAY_FEATURE_REPO"]
    volumes = (f"{data}:{repo}/data", f"{specs}:{SPECS}")
    command = ["python", "-c", PEAK_RSS, "gateway", "compile-features", "--out", SPECS]
    start = time.monotonic()
    with working_container(full_tag) as (ctr, rootfs):
        check_filesystem(rootfs, report, "full")
        argv = run_argv(ctr, config, {}, *command, volumes=volumes)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    seconds = time.monotonic() - start
    written = sorted(p.name for p in specs.glob("*.json"))
    refused = json.loads((specs / "refused.json").read_text()) if (specs / "refused.json").is_file() else None
    peaks = [int(line) for line in done.stderr.splitlines() if line.strip().isdigit()]
    peak_mib = peaks[-1] / 1024 if peaks else float("nan")
    limit = mebibytes(yaml_values()["gateway"]["featureSpecs"]["resources"]["limits"]["memory"])
    ok = done.returncode == 0 and refused == {} and len(written) > 1 and peak_mib <= limit
    detail = (
        f"{', '.join(written)} in {seconds:.0f} s, peak RSS {peak_mib:.0f} MiB "
        f"(the chart's init containers: limit {limit:g} MiB)"
    )
    report.add(
        "feature specs compiled by the full image", ok, detail if ok else f"{detail}: {done.stderr[-2000:]}"
    )


def check_refusals(ctr: str, config: dict[str, Any], volumes: tuple[str, ...], report: Report) -> None:
    """The serving image's gateway refuses at start, in one `error:` line (and its `hint:`), no
    traceback: without feature specs (naming compile-features and GATEWAY_FEATURE_SPECS), and
    with a payload log (pyarrow's Parquet writer: naming the full image)."""
    entry = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    cases = {
        "no specs": ({}, ("compile-features", "GATEWAY_FEATURE_SPECS")),
        "payload log": (
            {"GATEWAY_FEATURE_SPECS": SPECS, "GATEWAY_PAYLOAD_LOG": "/tmp/payload-log"},
            ("GATEWAY_PAYLOAD_LOG", "gateway-full"),
        ),
    }
    details, ok = [], True
    for case, (env, words) in cases.items():
        argv = run_argv(ctr, config, env, *entry, volumes=volumes)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        # buildah adds its own "subprocess exited" lines: the gateway's are the error:/hint: ones
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        good = done.returncode != 0 and len(errors) == 1 and "Traceback" not in done.stderr
        good = good and all(word in done.stderr for word in words)
        ok = ok and good
        details.append(f"{case}: exit {done.returncode}, {errors[0] if errors else done.stderr[-300:]!r}")
    report.add("serving image refuses what it cannot serve", ok, "; ".join(details))


def check_running(tag: str, full_tag: str, workdir: Path, report: Report) -> None:
    """The serving image's entrypoint, on specs the full image compiled, against a host Triton +
    Feast store, beside the source tree's gateway."""
    config = image_config(tag)
    start = time.monotonic()
    with host_stack(workdir) as (repo, triton_url):
        report.timings_s["host_stack"] = round(time.monotonic() - start, 1)
        # the generated store and the specs folder, mounted as the pod's volumes are and owned by
        # the images' user (.dockerignore keeps feature_repo/data out of the image)
        data, specs = repo / "data", workdir / "specs"
        specs.mkdir()
        for path in [specs, data, *data.rglob("*")]:
            os.chown(path, 10001, 10001)
        with report.timed("compile_specs"):
            compile_specs(full_tag, data, specs, report)
        # the specs name the SQLite file where the full image saw it: the same path here
        full_repo = dict(e.split("=", 1) for e in image_config(full_tag).get("Env") or [])
        volumes = (f"{data}:{full_repo['GATEWAY_FEATURE_REPO']}/data", f"{specs}:{SPECS}:ro")
        pass_env = {"GATEWAY_TRITON_URL": triton_url, "GATEWAY_MODELS": f'["{MODEL}"]'}
        env = {
            **pass_env,
            "GATEWAY_FEATURE_SPECS": SPECS,
            "GATEWAY_PORT": str(servers.free_port()),
            "GATEWAY_GRPC_PORT": str(servers.free_port()),
        }
        with report.timed("run_checks"), working_container(tag) as (ctr, rootfs):
            check_filesystem(rootfs, report, "serving")
            check_no_feast_closure(rootfs, report)
            check_refusals(ctr, config, volumes, report)
            source_env = {**pass_env, "GATEWAY_FEATURE_REPO": str(repo)}
            with (
                container_gateway(ctr, config, env, workdir, volumes) as image_gw,
                servers.gateway_process(workdir, source_env) as source_gw,
            ):
                report.add("/readyz", True, f"200 from the serving image's gateway at {image_gw.url}")
                check_process(image_gw, report)
                check_healthcheck(ctr, config, env, report)
                image_answer, source_answer = predict(image_gw.url), predict(source_gw.url)
                same = image_answer == source_answer
                scores = [p["score"] for p in image_answer["predictions"]]
                report.add("prediction equals the source tree's", same, f"scores {scores}" if same else
                           f"image {image_answer} != source {source_answer}")  # fmt: skip
                check_warm_memory(image_gw, repo, report)


def check_warm_memory(gw: Running, repo: Path, report: Report) -> None:
    """WARM_REQUESTS predictions (1-3 rows, the store's entities), a /metrics scrape (drift over
    them), then the serving process's resident memory (VmRSS), within the chart's request."""
    import requests

    status = dict.fromkeys(("predict", "metrics"), 0)
    users, merchants = demo_entities(repo)
    with requests.Session() as session:
        for i in range(WARM_REQUESTS):
            rows = [
                {**ROWS[j % len(ROWS)], "user_id": users[(7 * i + j) % len(users)],
                 "merchant_id": merchants[(i + j) % len(merchants)]}
                for j in range(1 + i % 3)
            ]  # fmt: skip
            answer = session.post(f"{gw.url}/v1/models/{MODEL}/predict", json={"rows": rows}, timeout=30)
            status["predict"] = max(status["predict"], answer.status_code)
        status["metrics"] = session.get(f"{gw.url}/metrics", timeout=30).status_code
    serving = [
        pid
        for pid in container_processes(gw.proc.pid)
        if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    rss_kib = max(int(proc_status(pid)["VmRSS"].split()[0]) for pid in serving)
    report.rss_mib = rss_kib / 1024
    request = mebibytes(yaml_values()["gateway"]["resources"]["requests"]["memory"])
    ok = status["predict"] < 500 and status["metrics"] == 200 and report.rss_mib <= request
    report.add(
        "resident memory after warm-up",
        ok,
        f"VmRSS {report.rss_mib:.0f} MiB after {WARM_REQUESTS} predictions and a /metrics scrape "
        f"(worst status {status['predict']}, /metrics {status['metrics']}; "
        f"the chart requests {request:g} MiB)",
    )


def demo_entities(repo: Path) -> tuple[list[int], list[int]]:
    """The user and merchant ids of the generated repository's feature tables."""
    import pandas as pd

    users = pd.read_parquet(repo / "data" / "user_stats.parquet", columns=["user_id"])["user_id"]
    merchants = pd.read_parquet(repo / "data" / "merchant_stats.parquet", columns=["merchant_id"])
    return sorted({int(u) for u in users}), sorted({int(m) for m in merchants["merchant_id"]})


def yaml_values() -> dict[str, Any]:
    import yaml

    return dict(yaml.safe_load(CHART_VALUES.read_text()))


def mebibytes(quantity: str) -> float:
    """A Kubernetes memory quantity (128Mi, 1Gi, 200M) in MiB."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return float(quantity[: -len(unit)]) * factor / 2**20
    return float(quantity) / 2**20


def check_sbom(tag: str, locks: tuple[str, ...], report: Report) -> None:
    """Write the image's SBOM beside it (build/<image>-<version>.cdx.json) and check that it lists
    every pin of ``locks`` at its version and nothing else but pip, setuptools (a base's venv)
    and the project itself."""
    from tools.locks import REQUIREMENTS, Lock
    from tools.sbom import SbomError, default_out, write_sbom

    out = default_out(tag)
    try:
        packages = write_sbom(tag, out)
    except SbomError as exc:
        report.add(f"SBOM of {tag}", False, str(exc))
        return
    found = {p.key: p.version for p in packages}
    required: dict[str, str] = {}
    optional: dict[str, str] = {}
    for lock in locks:
        for pin in Lock.read(REQUIREMENTS / lock).pins:
            name, _, version = pin.split(" ;", 1)[0].partition("==")
            (optional if ";" in pin else required)[canonicalize(name)] = version
    wrong = {n: (v, found.get(n, "missing")) for n, v in required.items() if found.get(n) != v}
    wrong |= {n: (v, found[n]) for n, v in optional.items() if n in found and found[n] != v}
    extra = sorted(set(found) - set(required) - set(optional) - {"pip", "setuptools", "triton-stack"})
    ok = not wrong and not extra
    detail = f"{len(packages)} packages, CycloneDX 1.6 JSON (schema-valid) in {out.relative_to(REPO)}"
    if not ok:
        detail += f"; differ (locked, found) {wrong}; not locked {extra}"
    report.add(f"SBOM of {tag} lists {' + '.join(locks)}", ok, detail)


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
            report.add(
                "serving image size", bounded, f"{report.size_mb:.0f} MB (bound {args.max_size_mb:g} MB)"
            )
            bounded = report.full_size_mb <= args.max_full_size_mb
            detail = f"{report.full_size_mb:.0f} MB (bound {args.max_full_size_mb:g} MB)"
            report.add("full image size", bounded, detail)
            check_sbom(args.tag, ("gateway.lock",), report)
            check_sbom(report.full_tag, ("gateway.lock", "gateway-full.lock"), report)
            if args.command == "check":
                check_running(args.tag, report.full_tag, workdir, report)
    except (ImageCheckError, servers.ServerStartError, subprocess.TimeoutExpired, OSError) as exc:
        report.add("error", False, str(exc))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_report(report, args.json)
    return 0 if report.ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.image_check", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--tag", default="triton-stack/gateway:dev", help="the serving image's tag")
    parser.add_argument("--max-size-mb", type=float, default=MAX_IMAGE_MB, help="the serving image's bound")
    parser.add_argument("--max-full-size-mb", type=float, default=MAX_FULL_IMAGE_MB)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def print_report(report: Report, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(report), indent=2))
        return
    print(f"\nimage {report.tag}: {report.size_mb:.0f} MB; {report.full_tag}: {report.full_size_mb:.0f} MB")
    print(
        f"on {report.base}"
        + (f"; serving gateway VmRSS {report.rss_mib:.0f} MiB warm" if report.rss_mib else "")
    )
    print("timings (s): " + ", ".join(f"{k} {v:g}" for k, v in report.timings_s.items()))
    passed = sum(c["ok"] for c in report.checks)
    print(f"checks: {passed}/{len(report.checks)} passed")


if __name__ == "__main__":
    sys.exit(main())
