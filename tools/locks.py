"""The lock files' hashes: every pin in requirements/*.lock carries the sha256 of each file the
index publishes for that version, so `pip install --require-hashes` installs exactly those bytes.

    .venv/bin/python -m tools.locks          # rewrite the hashes from the pins (pins unchanged)
    .venv/bin/python -m tools.locks --check  # exit 1 naming any pin without a hash

The pins are edited by hand (or derived, as each lock's header says); this only adds hashes, with
uv (`uv pip compile --no-deps --generate-hashes`: no resolution, the versions stay as written). It
also writes requirements/torch-cuda.lock: PyPI's (CUDA) build of torch-cpu.lock's version and what
it needs beyond project.lock, which `make venv` installs where the CPU build is not at hand.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements"
LOCKS = (
    "bootstrap.lock",
    "core.lock",
    "project.lock",
    "gateway.lock",
    "gateway-full.lock",
    "bench-mlserver.lock",
)
# torch comes from one of two locks, which `make venv` tries in turn: torch-cpu.lock (by hand: the
# CPU build is not on PyPI, uv cannot hash it) and torch-cuda.lock (written here from its version).
TORCH_CPU, TORCH_CUDA = "torch-cpu.lock", "torch-cuda.lock"
# The platform the locks are for: markers are evaluated for it, and the hashes cover every file
# of each version anyway (sdists and all wheels), so the same lock installs on any platform.
PYTHON_VERSION, PLATFORM = "3.11", "x86_64-manylinux_2_28"
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")


class LockError(Exception):
    """uv could not hash a lock (a version the index lacks, no network)."""


@dataclass
class Lock:
    header: list[str]  # the leading comment lines, kept as written
    pins: list[str]  # "name==version" with its marker, no hashes

    @classmethod
    def read(cls, path: Path) -> Lock:
        header: list[str] = []
        pins: list[str] = []
        for line in _logical_lines(path.read_text()):
            if line.startswith("#") and not pins:
                header.append(line)
            elif line and not line.startswith("#"):
                pins.append(_HASH.sub("", line.split(" #", 1)[0]).strip())
        return cls(header, pins)


def _logical_lines(text: str) -> list[str]:
    """Lines with pip's backslash continuations joined."""
    return text.replace("\\\n", " ").splitlines()


def hashes(text: str) -> dict[str, list[str]]:
    """Pin line -> its hashes, for every requirement line of a lock's text."""
    found: dict[str, list[str]] = {}
    for line in _logical_lines(text):
        if line.strip() and not line.lstrip().startswith("#"):
            pin = " ".join(_HASH.sub("", line).split())
            found[pin] = _HASH.findall(line)
    return found


def name_of(pin: str) -> str:
    return canonicalize_name(Requirement(pin).name)


def pinned(path: Path) -> dict[str, tuple[str, str]]:
    """canonical name -> (name as written, version) of every pin in a lock that applies to this
    interpreter (a pin whose marker is false here, such as gateway.lock's async-timeout for a
    Python before 3.11.3, is left out)."""
    found: dict[str, tuple[str, str]] = {}
    for pin in Lock.read(path).pins:
        requirement = Requirement(pin)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        (spec,) = requirement.specifier
        if spec.operator != "==":
            raise LockError(f"{path.name}: not an exact pin: {pin!r}")
        written = pin.split("==", 1)[0].split("[", 1)[0].strip()
        found[canonicalize_name(requirement.name)] = (written, spec.version)
    return found


def uv_compile(pins: list[str], *extra: str) -> str:
    """uv's hashed output for ``pins`` (one block per pin: the pin, then its ``--hash`` lines)."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "pins.in"
        source.write_text("\n".join(pins) + "\n")
        command = [
            str(Path(sys.executable).with_name("uv")), "pip", "compile", str(source), "--quiet",
            "--generate-hashes", "--no-header", "--no-annotate", "--python-version", PYTHON_VERSION,
            "--python-platform", PLATFORM, "--no-strip-markers", *extra,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LockError(f"uv pip compile failed: {done.stderr.strip()}")
    return done.stdout


def write(path: Path, header: list[str], compiled: str) -> None:
    path.write_text("\n".join(header) + ("\n" if header else "") + compiled)


def torch_cuda_lock() -> None:
    """PyPI's build of torch-cpu.lock's torch version and what it requires beyond project.lock and
    bootstrap.lock, hashed, at project.lock's versions where both name a package."""
    (cpu,) = Lock.read(REQUIREMENTS / TORCH_CPU).pins
    torch = cpu.split("+", 1)[0]  # the public version: PyPI's file for it is the CUDA build
    project, bootstrap = Lock.read(REQUIREMENTS / "project.lock"), Lock.read(REQUIREMENTS / "bootstrap.lock")
    known = {name_of(pin) for pin in project.pins + bootstrap.pins}
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("\n".join(project.pins) + "\n")
        compiled = uv_compile([torch], "--constraint", str(constraints))
    blocks = re.split(r"\n(?=\S)", compiled.strip())
    extra = [block for block in blocks if name_of(block.split()[0]) not in known]
    header = [
        "# PyPI's build of torch (CUDA, on Linux x86_64) and what it requires beyond project.lock: what",
        "# `make venv` installs where torch-cpu.lock's file is not on the machine. Generated by",
        "# `python -m tools.locks` from torch-cpu.lock's version; do not edit.",
    ]
    write(REQUIREMENTS / TORCH_CUDA, header, "\n".join(extra) + "\n")


def unhashed(path: Path) -> list[str]:
    return [pin for pin, found in hashes(path.read_text()).items() if not found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.locks", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that every pin has hashes")
    args = parser.parse_args(argv)
    paths = [REQUIREMENTS / name for name in (*LOCKS, TORCH_CPU, TORCH_CUDA)]
    if args.check:
        missing = {path.name: unhashed(path) for path in paths}
        missing = {name: pins for name, pins in missing.items() if pins}
        for name, pins in missing.items():
            print(f"error: {name}: no hash for {', '.join(pins)}", file=sys.stderr)
        return 1 if missing else 0
    try:
        for path in paths[: len(LOCKS)]:
            lock = Lock.read(path)
            write(path, lock.header, uv_compile(lock.pins, "--no-deps"))
            print(f"{path.name}: {len(lock.pins)} pins hashed")
        torch_cuda_lock()
    except LockError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{TORCH_CUDA}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
