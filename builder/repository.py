"""Atomic writes into a Triton model repository.

Layout (Triton's): ``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/<files>``, plus
``<version>/metadata.json`` (where the version came from, its signature and parity figures).

A version directory appears whole or not at all: it is staged as ``<model>/.staging-*`` (not a
number, so Triton never treats it as a version) and renamed into place; ``config.pbtxt`` and
warm-up files are replaced with ``os.replace``. Everything is staged before anything is
renamed, so a failure in any model of an ensemble leaves the repository as it was.
Re-exporting the same source (same registry version, run and export settings: the artifact's
``identity``) is a no-op, even where a converter's output is not byte-for-byte reproducible;
anything else under an existing version number is refused unless forced, since a serving
Triton may hold that version.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.config import ModelConfig, to_pbtxt
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


def _atomic_write(path: Path, data: bytes) -> None:
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
    results = []
    for art, status, stage in staged:
        model_dir = repo / art.name
        new_model = model_dir in created_dirs
        if new_model:
            # A new model gets its config first: a polling Triton that sees the folder finds
            # a config with no version yet (not loadable), never a version without a config.
            _write_model_files(model_dir, art)
        if stage is not None:
            _swap_in(stage, model_dir / str(version))
        if not new_model:
            _write_model_files(model_dir, art)
        results.append(
            WriteResult(
                art.name,
                version,
                status,
                model_dir / str(version),
                tuple(sorted(art.version_files)),
            )
        )
    return results


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
        _atomic_write(model_dir / rel, data)
    text = to_pbtxt(art.config).encode()
    config_path = model_dir / "config.pbtxt"
    if not config_path.exists() or config_path.read_bytes() != text:
        _atomic_write(config_path, text)


def _clean_stale_staging(model_dir: Path) -> None:
    """Remove staging folders a crashed export left behind (they are never loadable)."""
    for child in model_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(child, ignore_errors=True)
