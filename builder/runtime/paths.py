"""Where the embedded Triton runtime lives on disk, and how to find an installed one.

Layout under the runtime root (see ``install.py`` for how each part is made)::

    <root>/
      pytriton/                    pip --target of the nvidia-pytriton wheel (no deps)
        pytriton/tritonserver/     bin/tritonserver, caches/, python_backend_stubs/
        nvidia_pytriton.libs/      every shared library the server, backend and stub need
      backends/                    the one --backend-directory Triton is given
        python/                    libtriton_python.so + the stub for our Python + utils
        onnxruntime/               the same, renamed libtriton_onnxruntime.so, + model.py shim
      model-env/                   venv the Python-backend stub runs models in (numpy<2)
      install-stamp.json           written last by install: its presence means "complete"
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import RuntimeSetupError

STAMP_NAME = "install-stamp.json"
_ENV_VAR = "BUILDER_RUNTIME_DIR"


PROJECT_RUNTIME = ".runtime"
_PROJECT_MARKERS = ("pyproject.toml", ".git")


def default_runtime_dir(start: Path | None = None) -> Path:
    """Where the runtime is looked for (and installed) when ``--runtime-dir`` is not given.

    ``$BUILDER_RUNTIME_DIR`` if set; else the project's ``.runtime/`` when it holds an install
    stamp, the project being the nearest folder at or above ``start`` (default: the current
    directory) with a ``pyproject.toml`` or ``.git``; else ``~/.cache/triton-stack/runtime``.
    The middle rule is why ``builder serve`` typed in a shell after ``make demo`` finds the
    runtime ``make`` installed: the Makefile exports the variable only to its own recipes.
    """
    configured = os.environ.get(_ENV_VAR)
    if configured:
        return Path(configured).expanduser()
    project = project_runtime_dir(start or Path.cwd())
    if project is not None:
        return project
    return Path.home() / ".cache" / "triton-stack" / "runtime"


def project_runtime_dir(start: Path) -> Path | None:
    """The installed ``.runtime/`` of the project ``start`` lies in, or None.

    The search stops at the first project root: a ``.runtime`` of an enclosing, unrelated
    folder is not this project's.
    """
    for folder in (start.absolute(), *start.absolute().parents):
        candidate = folder / PROJECT_RUNTIME
        if (candidate / STAMP_NAME).is_file():
            return candidate
        if any((folder / marker).exists() for marker in _PROJECT_MARKERS):
            return None
    return None


@dataclass(frozen=True)
class RuntimePaths:
    """The files of one runtime root; every path is derived from ``root``.

    ``python_libdir`` is the directory holding ``libpython3.X.so.1.0`` of the interpreter the
    model env was made from; the stub loads it through the dynamic loader, so the launcher
    puts it on ``LD_LIBRARY_PATH``. It is recorded in the stamp at install time.
    """

    root: Path
    python_libdir: Path | None = None

    @property
    def pytriton_dir(self) -> Path:
        """The ``pip install --target`` directory of the nvidia-pytriton wheel."""
        return self.root / "pytriton"

    @property
    def tritonserver_dir(self) -> Path:
        """The wheel's Triton tree (bin/, backends/, caches/, python_backend_stubs/)."""
        return self.pytriton_dir / "pytriton" / "tritonserver"

    @property
    def tritonserver(self) -> Path:
        """The real ``tritonserver`` binary."""
        return self.tritonserver_dir / "bin" / "tritonserver"

    @property
    def caches_dir(self) -> Path:
        """Response-cache implementations (``--cache-directory``)."""
        return self.tritonserver_dir / "caches"

    @property
    def libs_dir(self) -> Path:
        """``nvidia_pytriton.libs``: needed on LD_LIBRARY_PATH by backends copied elsewhere."""
        return self.pytriton_dir / "nvidia_pytriton.libs"

    @property
    def backends_dir(self) -> Path:
        """The single ``--backend-directory``: holds ``python/`` and ``onnxruntime/``."""
        return self.root / "backends"

    @property
    def model_env(self) -> Path:
        """The virtual environment Python-backend models (and the onnxruntime shim) run in."""
        return self.root / "model-env"

    @property
    def model_env_bin(self) -> Path:
        """Put first on the server's PATH: the stub finds its ``python3`` (and prefix) there."""
        return self.model_env / "bin"

    @property
    def model_env_python(self) -> Path:
        """The model env's interpreter."""
        return self.model_env_bin / "python"

    @property
    def stamp(self) -> Path:
        """Written last by a successful install; records the pinned versions."""
        return self.root / STAMP_NAME

    def required_files(self) -> list[Path]:
        """Files whose absence means the runtime is broken even when the stamp exists."""
        return [
            self.tritonserver,
            self.backends_dir / "python" / "libtriton_python.so",
            self.backends_dir / "python" / "triton_python_backend_stub",
            self.backends_dir / "onnxruntime" / "libtriton_onnxruntime.so",
            self.backends_dir / "onnxruntime" / "model.py",
            self.model_env_python,
        ]


def read_stamp(root: Path) -> dict[str, Any] | None:
    """The install stamp under ``root`` as a dict, or None if missing or unreadable."""
    try:
        data = json.loads((root / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def locate_runtime(root: Path | None = None) -> RuntimePaths:
    """Return the installed runtime at ``root`` (default: ``default_runtime_dir()``).

    Raises RuntimeSetupError when the stamp is missing (never installed, or an install that
    did not finish) or when a file the server needs has since disappeared.
    """
    root = (root or default_runtime_dir()).expanduser().absolute()
    stamp = read_stamp(root)
    if stamp is None:
        raise RuntimeSetupError(
            f"embedded Triton runtime not installed at {root}",
            hint="run `builder runtime install`",
        )
    libdir = stamp.get("python_libdir")
    paths = RuntimePaths(root=root, python_libdir=Path(libdir) if libdir else None)
    missing = [p for p in paths.required_files() if not p.exists()]
    if missing:
        raise RuntimeSetupError(
            f"embedded Triton runtime not installed at {root} (incomplete: {missing[0]} is missing)",
            hint="run `builder runtime install` (it repairs an incomplete runtime)",
        )
    return paths
