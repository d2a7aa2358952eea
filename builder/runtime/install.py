"""Install the embedded Triton runtime: the real tritonserver, its backends, a model env.

Idempotent and repairable. Each heavy part (the server wheel, the model env) carries its own
marker of what it was built from, so a rerun after a failure redoes only what is missing. The
stamp ``install-stamp.json`` is written last: ``locate_runtime`` trusts nothing without it.
Concurrent installs into one root (pytest-xdist workers) are serialised by a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from builder.errors import RuntimeSetupError
from builder.runtime.paths import RuntimePaths, read_stamp

# The one source of truth for what the runtime is made of. requirements/model-env.txt
# mirrors MODEL_ENV_REQUIREMENTS for people to read; a unit test keeps the two equal.
PYTRITON_REQUIREMENT = "nvidia-pytriton==0.7.0"
TRITONSERVER_VERSION = "2.51.0"  # what that wheel carries: the NGC 24.10 release
MODEL_ENV_REQUIREMENTS: tuple[str, ...] = (
    # The wheel's stub misreads numpy 2 arrays; 1.26 is the last numpy 1.
    "numpy==1.26.4",
    # Same onnxruntime as the project env, so parity checks and serving agree; it still
    # supports numpy>=1.21.6. The rest is its dependency closure, pinned for repeatability.
    "onnxruntime==1.32.0",
    "flatbuffers==25.12.19",
    "packaging==26.4",
    "protobuf==7.36.2",
)
STAMP_FORMAT = 1
_PIP_TIMEOUT_S = 1800  # a whole pip run; pip's own --timeout bounds each socket read
_SHIM_SOURCE = Path(__file__).parent / "backends" / "onnxruntime" / "model.py"
_MARKER = ".built-from.json"  # inside pytriton/ and model-env/: what that part was built from

Log = Callable[[str], None]


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _python_libdir() -> Path:
    """LIBDIR of the running interpreter, checked to hold a shared libpython for the stub."""
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not libdir or not soname:
        raise RuntimeSetupError(
            f"runtime install step 'check interpreter' failed: {sys.executable} was built "
            "without a shared libpython, which the Triton Python-backend stub needs",
            hint="use a Python built with --enable-shared "
            "(pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install 3.11)",
        )
    if not (Path(libdir) / soname).exists():
        raise RuntimeSetupError(
            f"runtime install step 'check interpreter' failed: {soname} not found in {libdir}",
            hint="reinstall this Python with --enable-shared",
        )
    return Path(libdir)


def _uv() -> str | None:
    """uv, where this environment has it (the Makefile's venv does: requirements/bootstrap.lock).
    With its cache warm it lays out the runtime in ~1.4 s where pip takes ~19 s on 2 cores (the
    model env's venv and pip run alone ~13 s); a builder installed without uv uses pip."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _pip_install(python: str | Path, *args: str | Path) -> list[str | Path]:
    """``pip install ARGS`` into the environment of ``python``: uv's where there is uv, else that
    interpreter's own pip."""
    uv = _uv()
    if uv:
        return [uv, "pip", "install", "--quiet", "--python", python, *args]
    return [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", *args]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _shim_digest() -> str:
    return hashlib.sha256(_SHIM_SOURCE.read_bytes()).hexdigest()[:16]


def _wanted_stamp(libdir: Path) -> dict[str, Any]:
    """Everything that, when changed, makes an existing install stale."""
    return {
        "stamp_format": STAMP_FORMAT,
        "pytriton": PYTRITON_REQUIREMENT,
        "python": _python_version(),
        "python_libdir": str(libdir),
        "model_env": list(MODEL_ENV_REQUIREMENTS),
        "onnxruntime_shim": _shim_digest(),
    }


def _is_current(paths: RuntimePaths, wanted: dict[str, Any]) -> bool:
    have = read_stamp(paths.root)
    if have is None or {k: have.get(k) for k in wanted} != wanted:
        return False
    return all(p.exists() for p in paths.required_files())


@contextmanager
def _install_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(step: str, cmd: Sequence[str | Path]) -> None:
    """Run a setup command; a failure names the step and pip's own last error line."""
    try:
        done = subprocess.run(
            [str(c) for c in cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=_PIP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeSetupError(
            f"runtime install step '{step}' failed: {exc}",
            hint="check network access to the package index and rerun `builder runtime install`",
        ) from exc
    if done.returncode != 0:
        program = Path(str(cmd[0])).name
        tool = "pip" if program != "uv" and "pip" in cmd[1:3] else program
        lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.lower().startswith(("error", "  × "))] or lines or ["(no output)"]
        raise RuntimeSetupError(
            f"runtime install step '{step}' failed: {tool} exited {done.returncode}: {errors[-1].strip()}",
            hint="fix the cause above and rerun `builder runtime install`; finished steps are kept",
        )


def _marker_matches(folder: Path, wanted: dict[str, Any]) -> bool:
    try:
        return bool(json.loads((folder / _MARKER).read_text()) == wanted)
    except (OSError, ValueError):
        return False


def _staging_dir(root: Path, part: str) -> Path:
    """A fresh sibling to build ``part`` in; renamed into place only when complete."""
    staging = Path(tempfile.mkdtemp(prefix=f"{part}.partial-", dir=root))
    staging.chmod(0o755)  # mkdtemp's 0700 would lock other users out of a shared runtime
    return staging


def _install_server(paths: RuntimePaths, log: Log) -> None:
    """pip-install the wheel, without its deps (it pins numpy<2), into a fresh dir, then swap."""
    wanted = {"requirement": PYTRITON_REQUIREMENT}
    if _marker_matches(paths.pytriton_dir, wanted) and paths.tritonserver.exists():
        log("  already present")
        return
    staging = _staging_dir(paths.root, "pytriton")
    try:
        _run(
            "download Triton server",
            _pip_install(sys.executable, "--no-deps", "--target", staging, PYTRITON_REQUIREMENT),
        )
        (staging / _MARKER).write_text(json.dumps(wanted))
        shutil.rmtree(paths.pytriton_dir, ignore_errors=True)
        staging.rename(paths.pytriton_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _install_backends(paths: RuntimePaths, log: Log) -> None:
    """Lay out ``backends/{python,onnxruntime}`` so one --backend-directory finds both.

    A Python-based backend is a folder with ``libtriton_<name>.so`` (a copy of the Python
    backend library), the stub and a ``model.py``. The backend library also looks for
    ``triton_python_backend_utils.py`` next to itself, so each folder gets its own copy.
    """
    source = paths.tritonserver_dir / "backends" / "python"
    stub = (
        paths.tritonserver_dir / "python_backend_stubs" / _python_version()
        / "triton_python_backend_stub"
    )  # fmt: skip
    if not stub.exists():
        raise RuntimeSetupError(
            f"runtime install step 'lay out backends' failed: the wheel has no stub for "
            f"Python {_python_version()}",
            hint="run the builder with Python 3.11 (the stub embeds that exact version)",
        )
    staging = _staging_dir(paths.root, "backends")
    try:
        for name, library in (("python", "libtriton_python.so"),
                              ("onnxruntime", "libtriton_onnxruntime.so")):  # fmt: skip
            folder = staging / name
            folder.mkdir()
            shutil.copy2(source / "libtriton_python.so", folder / library)
            shutil.copy2(source / "triton_python_backend_utils.py", folder)
            shutil.copy2(stub, folder / "triton_python_backend_stub")
        shutil.copy2(_SHIM_SOURCE, staging / "onnxruntime" / "model.py")
        shutil.rmtree(paths.backends_dir, ignore_errors=True)
        staging.rename(paths.backends_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"  {paths.backends_dir}: python, onnxruntime")


def _install_model_env(paths: RuntimePaths, log: Log) -> None:
    """Create the model venv in place (venvs are not relocatable), marker last."""
    wanted = {"python": sys.version, "requirements": list(MODEL_ENV_REQUIREMENTS)}
    if _marker_matches(paths.model_env, wanted) and paths.model_env_python.exists():
        log("  already present")
        return
    shutil.rmtree(paths.model_env, ignore_errors=True)
    try:
        uv = _uv()  # the venv on this interpreter's base Python either way; uv's has no pip of its own
        _run(
            "create model env",
            [uv, "venv", "--quiet", "--python", sys.executable, paths.model_env]
            if uv
            else [sys.executable, "-m", "venv", "--clear", paths.model_env],
        )
        _run("install model env requirements", _pip_install(paths.model_env_python, *MODEL_ENV_REQUIREMENTS))
        (paths.model_env / _MARKER).write_text(json.dumps(wanted))
    except BaseException:
        shutil.rmtree(paths.model_env, ignore_errors=True)
        raise
    log(f"  {paths.model_env}: " + ", ".join(MODEL_ENV_REQUIREMENTS[:2]))


_STEPS: tuple[tuple[str, Callable[[RuntimePaths, Log], None]], ...] = (
    (f"Triton server ({PYTRITON_REQUIREMENT}, no deps)", _install_server),
    ("backends (python, onnxruntime shim)", _install_backends),
    ("model execution env", _install_model_env),
)


def install_runtime(root: Path, *, log: Log = print) -> RuntimePaths:
    """Install (or repair, or confirm) the embedded Triton runtime under ``root``.

    A second call on a complete, current install only reads the stamp. Any failure raises
    RuntimeSetupError naming the step; the stamp is removed first and written last, so a
    failed install is never reported as installed.
    """
    root = root.expanduser().absolute()
    libdir = _python_libdir()
    wanted = _wanted_stamp(libdir)
    paths = RuntimePaths(root=root, python_libdir=libdir)
    if _is_current(paths, wanted):
        log(f"Triton runtime already installed at {root}")
        return paths
    with _install_lock(root):
        if _is_current(paths, wanted):  # another process finished it while we waited
            return paths
        paths.stamp.unlink(missing_ok=True)
        for number, (title, step) in enumerate(_STEPS, start=1):
            log(f"[{number}/{len(_STEPS)}] {title}")
            try:
                step(paths, log)
            except OSError as exc:
                raise RuntimeSetupError(
                    f"runtime install step '{title}' failed: {exc}",
                    hint=f"check that {root} is writable and has free space, then rerun",
                ) from exc
        tmp = paths.stamp.with_suffix(".tmp")
        stamp = {**wanted, "tritonserver": TRITONSERVER_VERSION, "installed_at": _now()}
        tmp.write_text(json.dumps(stamp, indent=2) + "\n")
        tmp.replace(paths.stamp)
    log(f"Triton runtime installed at {root}")
    return paths
