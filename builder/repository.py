"""Atomic writes into a Triton model repository.

Layout (Triton's): ``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/<files>``, plus
``<version>/metadata.json`` (where the version came from, its signature and parity figures).

A version directory appears whole or not at all: it is staged as ``<model>/.staging-*`` (not a
number, so Triton never treats it as a version) and renamed into place; ``config.pbtxt`` and
warm-up files are replaced with ``os.replace``. Everything is staged before anything is
renamed, so a failure in any model of an ensemble leaves the repository as it was.

A kill (SIGKILL, OOM) during the renames leaves no mix for Triton to serve: an ensemble pins its
steps' versions and loads only its own pinned version (``specific``), so replacing its
config.pbtxt is the one commit point. Before it, each step's config (shared by all its versions)
is rewritten to keep the pinned old version loaded beside the new one, and a step's parameters
live in its version (inside its ONNX graph, with spec.json beside it as the readable record),
never in the shared config; after it, the steps' final configs let the old versions go. The
next export of the same version rolls a killed one forward.
Re-exporting the same source (same registry version, run and export settings: the artifact's
``identity``) is a no-op, even where a converter's output is not byte-for-byte reproducible;
anything else under an existing version number is refused unless forced, since a serving
Triton may hold that version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from builder.config import ModelConfig, parse_pbtxt, to_pbtxt
from builder.errors import RepositoryError
from builder.names import validate_model_name

METADATA_FILE = "metadata.json"
STAGING_PREFIX = ".staging-"


@dataclass(frozen=True)
class ModelArtifact:
    """One model's share of an export: its config and the files of one version."""

    name: str
    config: ModelConfig
    version_files: dict[str, bytes]
    model_files: dict[str, bytes] = field(default_factory=dict)  # e.g. warmup/<input>
    metadata: dict[str, Any] = field(default_factory=dict)
    # What makes two exports "the same": defaults to the digest of the version files.
    identity: str | None = None


@dataclass(frozen=True)
class WriteResult:
    name: str
    version: int
    status: str  # "written" | "unchanged" | "replaced"
    path: Path
    files: tuple[str, ...]


def content_digest(files: dict[str, bytes]) -> str:
    """A digest of a version's files (names and bytes): equal digests mean the same export."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def read_metadata(version_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((version_dir / METADATA_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_models(
    repo: Path, version: int, artifacts: list[ModelArtifact], *, force: bool = False
) -> list[WriteResult]:
    """Write every artifact's version ``version`` and config into ``repo``, all or nothing."""
    if version < 1:
        raise RepositoryError(f"version {version} is not a positive integer")
    for art in artifacts:
        validate_model_name(art.name)
    repo.mkdir(parents=True, exist_ok=True)
    plans = [_plan(repo, version, art, force) for art in artifacts]
    created_dirs: list[Path] = []
    staged: list[tuple[ModelArtifact, str, Path | None]] = []
    try:
        for art, status in plans:
            model_dir = repo / art.name
            if not model_dir.exists():
                model_dir.mkdir()
                created_dirs.append(model_dir)
            _clean_stale_staging(model_dir)
            staged.append((art, status, None if status == "unchanged" else _stage(model_dir, art)))
    except OSError as exc:
        for _, _, stage in staged:
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)
        for d in created_dirs:
            shutil.rmtree(d, ignore_errors=True)
        raise RepositoryError(f"cannot write into {repo}: {exc}") from exc
    _fault("staged")
    results = []
    ensembles = [(a, st, sg) for a, st, sg in staged if a.config.platform == "ensemble"]
    singles = [(a, st, sg) for a, st, sg in staged if a.config.platform != "ensemble"]
    held = _held_versions(repo, version, [a for a, _, _ in ensembles])
    for art, status, stage in [*singles, *ensembles]:
        model_dir = repo / art.name
        new_model = model_dir in created_dirs
        if art.name in held:
            # An ensemble step: its config (shared by every version) first keeps the version
            # the current ensemble pins loaded beside the new one, until the ensemble commits.
            _write_model_files(model_dir, _holding(art, held[art.name], version))
            _fault(f"hold:{art.name}")
        if new_model:
            # A new model gets its config first: a polling Triton that sees the folder finds a
            # config with no version yet (not loadable), never a version without a config.
            _write_model_files(model_dir, art)
            _fault(f"config:{art.name}")
        if stage is not None:
            _swap_in(stage, model_dir / str(version))
            _fault(f"version:{art.name}")
        if not new_model and art.name not in held:
            # For an ensemble this is the commit: its old config loads only the old version
            # (``specific``, see ensemble_config) and pins the old steps; the new one, the new.
            _write_model_files(model_dir, art)
            _fault(f"config:{art.name}")
        results.append(
            WriteResult(
                art.name,
                version,
                status,
                model_dir / str(version),
                tuple(sorted(art.version_files)),
            )
        )
    for art, _, _ in singles:
        if art.name in held:  # the ensembles now run the new versions: let the old ones go
            _write_model_files(repo / art.name, art)
            _fault(f"release:{art.name}")
    return results


FAULT_ENV = "BUILDER_FAULT_AT"


def _fault(point: str) -> None:
    """Test hook: ``BUILDER_FAULT_AT=<point>`` SIGKILLs the export right after ``point`` (e.g.
    ``staged``, ``version:NAME``, ``config:NAME_ensemble``), as a crash or an OOM kill would,
    so that tests can check what every intermediate state leaves Triton to load."""
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _held_versions(repo: Path, version: int, ensembles: list[ModelArtifact]) -> dict[str, int]:
    """For each step of the ensembles being written: the version the ensemble on disk runs now,
    where that is not ``version`` (the one this export writes) and must stay loaded meanwhile."""
    held: dict[str, int] = {}
    for art in ensembles:
        current = _read_config(repo / art.name)
        if current is None:
            continue  # a new ensemble: nothing serves yet, nothing to keep
        for step in current.ensemble_scheduling.step:
            pinned = step.model_version
            if pinned <= 0:  # "latest": written before steps were pinned
                pinned = max(model_versions(repo / step.model_name), default=0)
            if pinned > 0 and pinned != version:
                held[step.model_name] = pinned
    return held


def _holding(art: ModelArtifact, old: int, new: int) -> ModelArtifact:
    """``art`` with a config that loads both ``old`` and ``new`` (the export's transition)."""
    config = ModelConfig()
    config.CopyFrom(art.config)
    config.version_policy.Clear()
    config.version_policy.specific.versions.extend(sorted({old, new}))
    return dataclasses.replace(art, config=config)


def _read_config(model_dir: Path) -> ModelConfig | None:
    try:
        return parse_pbtxt((model_dir / "config.pbtxt").read_text())
    except (OSError, UnicodeDecodeError, text_format.ParseError):
        return None


def model_versions(model_dir: Path) -> list[int]:
    """The numeric version folders of a model, ascending (what Triton calls its versions)."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def _plan(repo: Path, version: int, art: ModelArtifact, force: bool) -> tuple[ModelArtifact, str]:
    digest = content_digest(art.version_files)
    identity = art.identity or digest
    art = ModelArtifact(
        name=art.name,
        config=art.config,
        version_files=art.version_files,
        model_files=art.model_files,
        metadata={**art.metadata, "content_sha256": digest, "identity": identity},
        identity=identity,
    )
    version_dir = repo / art.name / str(version)
    if not version_dir.exists():
        return art, "written"
    existing = read_metadata(version_dir) or {}
    if existing.get("identity") == identity:
        return art, "unchanged"
    if not force:
        origin = existing.get("source", {}).get("uri", "an unknown source")
        raise RepositoryError(
            f"{version_dir} already exists with different content (exported from {origin})",
            hint="a serving Triton may hold that version: export under a new registry version, "
            "or pass --force to replace it",
        )
    return art, "replaced"


def _stage(model_dir: Path, art: ModelArtifact) -> Path:
    stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=model_dir))
    for rel, data in art.version_files.items():
        target = stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (stage / METADATA_FILE).write_text(json.dumps(art.metadata, indent=2, sort_keys=True) + "\n")
    for f in stage.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    os.chmod(stage, 0o755)  # mkdtemp makes 0700; Triton may run as another user in production
    return stage


def _swap_in(stage: Path, version_dir: Path) -> None:
    if version_dir.exists():
        # rename() cannot replace a non-empty directory: move the old one aside first.
        trash = version_dir.with_name(f"{STAGING_PREFIX}old-{version_dir.name}-{os.getpid()}")
        os.rename(version_dir, trash)
        os.rename(stage, version_dir)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(stage, version_dir)


def _write_model_files(model_dir: Path, art: ModelArtifact) -> None:
    for rel, data in art.model_files.items():
        atomic_write(model_dir / rel, data)
    text = to_pbtxt(art.config).encode()
    config_path = model_dir / "config.pbtxt"
    if not config_path.exists() or config_path.read_bytes() != text:
        atomic_write(config_path, text)


def _clean_stale_staging(model_dir: Path) -> None:
    """Remove staging folders a crashed export left behind (they are never loadable)."""
    for child in model_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(child, ignore_errors=True)
