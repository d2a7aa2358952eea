"""Atomic writes into a Triton model repository.

Layout (Triton's): ``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/<files>``, plus
``<version>/metadata.json`` (where the version came from, its signature and parity figures).

A version directory appears whole or not at all: it is staged as ``<model>/.staging-*`` (not a
number, so Triton never treats it as a version) and renamed into place; ``config.pbtxt`` and
warm-up files are replaced with ``os.replace``. Everything is staged before anything is
renamed, so a failure in any model of an ensemble leaves the repository as it was.

Every model has one commit point, the replace of its ``config.pbtxt``; a kill (SIGKILL, OOM) at
any step leaves Triton, polling the repository or loading it explicitly, the old version whole
or the new one whole, under every version policy. Each config carries the identity of the
export that wrote it (parameters ``builder.export_identity``, ``builder.export``), as each
version's metadata.json does. For a model that exists, in order:

1. hold: its config as it is (the old export's), with ``version_policy specific`` pinned to
   the versions it serves now, so that no new folder can load under it;
2. the new version folder renamed in (inert under the hold);
3. the warm-up files, then the final config: the commit.

A new model gets its config first and its version folder last (a folder without a config
would be auto-completed and served). A steps ensemble loads only its own pinned version
(``specific``) and pins its steps' versions, so replacing its config is that model's commit and
switches the steps it runs too. Each step's commit (3) keeps the version the serving ensemble
pins loaded beside the new one, and a step's parameters live in its version (inside its ONNX
graph, with spec.json beside it as the readable record), never in the shared config; after
the ensemble's commit, the steps' final configs let the old versions go. The next export of
the same version rolls a killed one forward and removes its staging folders and temp files.
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
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from builder.errors import RepositoryError
from builder.repository.names import validate_model_name
from builder.repository.triton_config import ModelConfig, parse_pbtxt, to_pbtxt
from serving_contract import keys

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
    """Replace ``path`` with ``data`` in one rename: a reader sees the old bytes or the new."""
    _atomic_write(path, data, path.name)


def write_models(
    repo: Path, version: int, artifacts: list[ModelArtifact], *, force: bool = False
) -> list[WriteResult]:
    """Write every artifact's version ``version`` and config into ``repo``, all or nothing.

    Each model has one commit point, the atomic replace of its config.pbtxt (see the module
    docstring for the sequence); a steps ensemble's is the replace of the ensemble's config."""
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
            clean_leftovers(model_dir)
            staged.append((art, status, None if status == "unchanged" else _stage(model_dir, art)))
            _fault(f"stage:{art.name}")
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
        # An ensemble step keeps the version the current ensemble pins loaded beside the new
        # one until the ensemble commits (its config is shared by every version).
        final = _holding(art, {held[art.name], version}) if art.name in held else art
        current = _read_config(model_dir)
        if current is None:
            # A new model gets its config first: a polling Triton that sees the folder finds a
            # config with no version yet (not loadable), never a version without a config
            # (which it would auto-complete and serve).
            _commit(model_dir, final)
            if stage is not None:
                _swap_in(stage, model_dir / str(version))
                _fault(f"version:{art.name}")
        else:
            if art.name in held or config_identity(current) != art.identity:
                # Pin what the old config serves (its own content, another export's version
                # folder never under it), so that the new folder is inert once renamed in.
                keep = _served_without(current, model_dir, version)
                if art.name in held:
                    keep.add(held[art.name])
                if keep:
                    _write_config(model_dir, _pinned(current, keep), f"hold:{art.name}")
            if stage is not None:
                _swap_in(stage, model_dir / str(version))
                _fault(f"version:{art.name}")
            # The commit: one replace switches the served version and its config together.
            # For an ensemble, its old config loads only the old version (``specific``, see
            # ensemble_config) and pins the old steps; the new one, the new.
            _commit(model_dir, final)
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
            _write_config(repo / art.name, art, f"release:{art.name}")
    return results


FAULT_ENV = "BUILDER_FAULT_AT"
# The parameters every exported config carries: which export wrote it (``builder validate``
# compares it with the served version's metadata.json).
IDENTITY_PARAMETER = keys.EXPORT_IDENTITY
EXPORT_PARAMETER = keys.EXPORT_LABEL
# atomic_write's temp files: ``.<name>.<8 random characters>`` beside the target (mkstemp).
_TEMP_FILE = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}$")


def _fault(point: str) -> None:
    """Test hook: ``BUILDER_FAULT_AT=<point>`` SIGKILLs the export right after ``point`` (e.g.
    ``staged``, ``hold:NAME``, ``version:NAME``, ``config:NAME``, ``temp:NAME/config.pbtxt``
    (a temp file written, not yet renamed)), as a crash or an OOM kill would, so that tests can
    check what every intermediate state leaves Triton to load. Tests that kill at every step
    replace this function (it is called at each filesystem step of the commit sequence)."""
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def config_identity(config: ModelConfig) -> str | None:
    """The identity of the export that wrote ``config`` (None: written before configs had one)."""
    param = config.parameters.get(IDENTITY_PARAMETER)
    return param.string_value if param is not None and param.string_value else None


def export_label(metadata: dict[str, Any]) -> str | None:
    """Which registry version (and run) a version folder was exported from, per its metadata:
    for a registered-model step (an ONNX model converted from another registry model), the
    export that wrote it beside its ensemble (``export``), not the model it came from."""
    source = metadata.get("export", metadata.get("source"))
    if not isinstance(source, dict):
        return None
    model = source.get("registered_name") or source.get("uri")
    if not model:
        return None
    version, run = source.get("version"), source.get("run_id")
    return f"{model}" + (f" v{version}" if version is not None else "") + (f" (run {run})" if run else "")


def loaded_versions(config: ModelConfig, versions: list[int]) -> list[int]:
    """The versions Triton loads of a model with these version folders (its version_policy),
    ascending; the last is the one a request that names no version gets."""
    versions = sorted(versions)
    policy = config.version_policy
    if policy.HasField("all"):
        return list(versions)
    if policy.HasField("specific"):
        return [v for v in versions if v in set(policy.specific.versions)]
    latest = policy.latest.num_versions if policy.HasField("latest") else 1
    return versions[-max(latest, 1) :]


def _served_without(current: ModelConfig, model_dir: Path, version: int) -> set[int]:
    """The versions the config on disk serves, leaving out ``version`` (the one being written:
    a folder of that number under the old config is not the old export's)."""
    others = [v for v in model_versions(model_dir) if v != version]
    return set(loaded_versions(current, others))


def _pinned(config: ModelConfig, versions: set[int]) -> ModelConfig:
    """The holding config: ``config`` as it is, loading exactly ``versions`` (``specific``)."""
    held = ModelConfig()
    held.CopyFrom(config)
    held.version_policy.Clear()
    held.version_policy.specific.versions.extend(sorted(versions))
    return held


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


def _holding(art: ModelArtifact, versions: set[int]) -> ModelArtifact:
    """``art`` with a config that loads exactly ``versions`` (a step's transition)."""
    return dataclasses.replace(art, config=_pinned(art.config, versions))


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
    metadata = {**art.metadata, "content_sha256": digest, "identity": identity}
    config = ModelConfig()
    config.CopyFrom(art.config)
    config.parameters[IDENTITY_PARAMETER].string_value = identity
    label = export_label(metadata)
    if label is not None:
        config.parameters[EXPORT_PARAMETER].string_value = label
    art = ModelArtifact(
        name=art.name,
        config=config,
        version_files=art.version_files,
        model_files=art.model_files,
        metadata=metadata,
        identity=identity,
    )
    model_dir = repo / art.name
    on_disk = model_versions(model_dir)
    served = loaded_versions(config, sorted({*on_disk, version}))
    if not served or served[-1] != version:
        # Triton has one config per model: written over a model whose newest served version is
        # another one, it would serve that version with this export's parameters (a mix).
        raise RepositoryError(
            f"{art.name}: its config would serve version(s) {served}, not version {version}, which "
            f"this export writes (version folders on disk: {on_disk})",
            hint="export the model's newest version, or pick a --version-policy that loads it",
        )
    version_dir = model_dir / str(version)
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
        _fault(f"aside:{version_dir.parent.name}")
        os.rename(stage, version_dir)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(stage, version_dir)


def _commit(model_dir: Path, art: ModelArtifact) -> None:
    """The model-level files, then the config (the commit point of an existing model). The
    warm-up files are shared by the model's versions and feed only warm-up requests (never an
    answer); a file that is already right is left alone, so a polling Triton sees no change."""
    for rel, data in art.model_files.items():
        _write_if_changed(model_dir / rel, data, f"{art.name}/{rel}")
    _write_config(model_dir, art, f"config:{art.name}")


def _write_config(model_dir: Path, art: ModelArtifact | ModelConfig, point: str) -> None:
    config = art.config if isinstance(art, ModelArtifact) else art
    if _write_if_changed(
        model_dir / "config.pbtxt", to_pbtxt(config).encode(), f"{model_dir.name}/config.pbtxt"
    ):
        _fault(point)


def _write_if_changed(path: Path, data: bytes, where: str) -> bool:
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    _atomic_write(path, data, where)
    return True


def _atomic_write(path: Path, data: bytes, where: str) -> None:
    """atomic_write with the test hook's steps: the temp file written, then the replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _fault(f"temp:{where}")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fault(f"file:{where}")


def leftover_temp_files(model_dir: Path) -> list[Path]:
    """atomic_write temp files an interrupted write left in a model folder or its non-version
    subfolders (``.config.pbtxt.*``, ``warmup/.NAME.*``): never read by Triton, never replaced."""
    folders = [model_dir, *(p for p in model_dir.iterdir() if p.is_dir() and not p.name.isdigit())]
    return sorted(
        f
        for folder in folders
        if not folder.name.startswith(STAGING_PREFIX)
        for f in folder.iterdir()
        if f.is_file() and _TEMP_FILE.match(f.name)
    )


def clean_leftovers(model_dir: Path) -> None:
    """Remove what a crashed export left behind: staging folders and temp files (neither is
    ever loadable)."""
    for child in model_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(child, ignore_errors=True)
    for temp in leftover_temp_files(model_dir):
        temp.unlink(missing_ok=True)
