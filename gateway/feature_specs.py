"""Compiling the feature repository's services for the direct reader, outside the serving process.

The compile step reads Feast's registry through the Feast SDK (feast_access/online/compile.py),
which costs the ~210 MiB of ``import feast`` (pandas, pyarrow, SQLAlchemy): the serving process
must not pay it. So ``gateway serve`` without ``--feature-specs`` runs ``gateway
compile-features`` as a child process into a temporary folder, started first so that it runs
while the serving process imports its own modules, and serves from that folder; a deployment
can compile once instead (an init container, the release pipeline) and pass the folder.

The serving image (the Dockerfile's default target) has neither Feast nor pyarrow: there the
gateway serves from a folder compiled by the full image (``--target full``; the chart's init
container), and ``refuse_what_needs_feast`` stops at start, in one line, what it cannot serve.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.refusal import refuse
from gateway.settings import FeatureSettings

COMPILE_TIMEOUT_S = 300  # a registry read and one spec per service; Feast's import dominates
# The image with Feast (the Dockerfile's `full` target), named in the serving image's refusals.
FULL_IMAGE = "triton-stack/gateway-full"
REFUSED_FILE = "refused.json"  # feast_access/online/spec.py's: the services left to the SDK's read


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (found, not imported: Feast's import is ~210 MiB)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a finder that refuses it outright
        return False


def refuse_what_needs_feast(settings: Any) -> None:
    """In an installation without Feast or pyarrow (the serving image), refuse at start, with one
    ``error:`` line and its ``hint:``, what would need them later: compiling the specs here (none
    given), the SDK reader, services the compiler left to the SDK, the payload log's Parquet."""
    features: FeatureSettings = settings.features
    full = f"the full image, {FULL_IMAGE} (the Dockerfile's `full` target)"
    if not installed("feast"):
        if features.reader == "sdk":
            raise refuse(
                "GATEWAY_FEATURE_READER=sdk reads through the Feast SDK, which this image leaves out",
                f"serve from {full}, or from specs `gateway compile-features` wrote (GATEWAY_FEATURE_SPECS)",
                2,
            )
        if features.specs is None:
            raise refuse(
                "no feature specs (GATEWAY_FEATURE_SPECS), and compiling them needs Feast, which this "
                "image leaves out",
                f"run `gateway compile-features --out DIR` in {full}, as the chart's init container "
                "does, and set GATEWAY_FEATURE_SPECS=DIR",
                2,
            )
        refused = features.specs / REFUSED_FILE
        to_sdk = sorted(json.loads(refused.read_text())) if refused.is_file() else []
        if to_sdk:
            raise refuse(
                f"feature specs in {features.specs}: {', '.join(to_sdk)} can only be read through the "
                "Feast SDK (refused.json), which this image leaves out",
                f"serve from {full}",
                2,
            )
    if settings.payload_log.url and not installed("pyarrow"):
        raise refuse(
            "the payload log (GATEWAY_PAYLOAD_LOG) writes Parquet with pyarrow, which this image leaves out",
            f"serve from {full}, as the chart does with gateway.payloadLog on, or unset GATEWAY_PAYLOAD_LOG",
            2,
        )


@dataclass
class Compiling:
    """A compile-features child process and the temporary folder it writes."""

    proc: subprocess.Popen[str]
    folder: Path


def start_compiling(settings: Any) -> Compiling | None:
    """The child that compiles ``settings``' repository, or None when there is nothing to compile
    (specs given, or the SDK reader asked for)."""
    features: FeatureSettings = settings.features
    if features.reader != "direct" or features.specs is not None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="gateway-features-"))
    command = [sys.executable, "-m", "gateway", "compile-features", "--out", str(folder)]
    command += ["--feature-repo", str(features.repo), "--online-store", features.online_store]
    env = dict(os.environ)
    if features.redis_url:  # in the environment, not on a command line `ps` shows
        env["GATEWAY_REDIS_URL"] = features.redis_url
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return Compiling(proc, folder)


def finish_compiling(settings: Any, compiling: Compiling | None) -> Any:
    """``settings`` with the compiled folder as its specs, once the child is done; its own
    ``error:`` lines and exit code when it failed."""
    if compiling is None:
        return settings
    try:
        _, stderr = compiling.proc.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        compiling.proc.kill()
        raise refuse(
            f"compiling the feature services took over {COMPILE_TIMEOUT_S} s",
            "compile once with `gateway compile-features --out DIR` and pass --feature-specs DIR",
            1,
        ) from None
    if compiling.proc.returncode != 0:
        sys.stderr.write(stderr)
        raise SystemExit(compiling.proc.returncode)
    features = settings.features.model_copy(update={"specs": compiling.folder})
    return settings.model_copy(update={"features": features})


def discard(compiling: Compiling | None) -> None:
    """Remove the temporary folder (and stop the child, when serving never started)."""
    if compiling is None:
        return
    if compiling.proc.poll() is None:
        compiling.proc.kill()
        compiling.proc.wait()
    shutil.rmtree(compiling.folder, ignore_errors=True)


def compile_into(features: FeatureSettings, out: Path) -> dict[str, str]:
    """Every feature service of the repository compiled into ``out``; the refused ones and why.
    Imports Feast: this runs in ``gateway compile-features``, never in a serving process."""
    from feast_access.online.compile import compile_repository
    from feast_access.online.errors import OnlineReadError
    from feast_access.store import open_store

    try:
        store = open_store(features.repo, features.online_store, features.redis_url)
        return compile_repository(store, out)
    except OnlineReadError as exc:
        raise refuse(str(exc), "serve with GATEWAY_FEATURE_READER=sdk (the Feast SDK's read)", 2) from exc
    except OSError as exc:
        raise refuse(
            f"cannot write the feature specs into {out}: {exc.strerror}", "check the folder", 1
        ) from exc
    except Exception as exc:  # Feast's own errors reading the registry or the store's config
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise refuse(
            f"cannot read the Feast repository {features.repo}: {first}",
            "run `feast apply` in it, or check --feature-repo / GATEWAY_FEATURE_REPO",
            2,
        ) from exc
