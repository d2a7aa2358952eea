"""Checking objects against KServe's CRD schema, as the API server would (and a bit more).

The CRD (``serving.kserve.io_inferenceservices.yaml``) comes from ``--crd``, else
``$KSERVE_CRD_DIR``, else the copy of KServe 0.20's vendored in ``crds/`` (gzipped): the project
names no path outside itself, and the check runs in any checkout or installed wheel. Besides the
OpenAPI schema, fields the schema does not declare are reported: structural-schema pruning would
drop them silently, so a misspelt field would vanish without an error on a real cluster.
"""

from __future__ import annotations

import gzip
import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from builder.release.api import API_VERSION
from builder.release.errors import ManifestError

CRD_FILE = "serving.kserve.io_inferenceservices.yaml"
VENDORED = Path(__file__).resolve().parent / "crds"


def find_crd(explicit: Path | None = None, filename: str = CRD_FILE) -> Path | None:
    """The CRD file to validate against (``filename``, or its ``.gz``), or None when there is none."""
    candidates = [explicit] if explicit is not None else []
    if not candidates:
        env = os.environ.get("KSERVE_CRD_DIR")
        candidates += [*([Path(env)] if env else []), VENDORED]
    for candidate in candidates:
        paths = [candidate / filename, candidate / f"{filename}.gz"] if candidate.is_dir() else [candidate]
        for path in paths:
            if path.is_file():
                return path
    if explicit is not None:
        raise ManifestError(
            f"no KServe CRD at {explicit}", [], hint=f"pass {CRD_FILE} or the folder holding it"
        )
    return None


@cache
def load_schema(crd_path: Path, api_version: str = API_VERSION) -> dict[str, Any]:
    """The ``openAPIV3Schema`` the API server applies at ``api_version`` (default: the
    InferenceService's v1beta1) from the CRD file at ``crd_path``."""
    crd = read_crd(crd_path)
    group = crd["spec"]["group"]
    for version in crd["spec"]["versions"]:
        if f"{group}/{version['name']}" == api_version and version.get("served", True):
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    raise ManifestError(f"{crd_path} does not serve {api_version}", [])


def read_crd(path: Path) -> dict[str, Any]:
    """A CRD file, plain or gzipped, as a dict."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    # libyaml's loader parses the large CRD about ten times faster than the pure-Python one.
    crd: dict[str, Any] = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return crd


def problems(obj: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Schema violations plus undeclared (would-be-pruned) fields, as ``path: message``."""
    import jsonschema

    validator = jsonschema.Draft7Validator(schema)
    found = [
        f"/{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]
    return found + [
        f"{path}: unknown field (the API server would prune it)" for path in pruned(obj, schema, "")
    ]


def pruned(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Paths that structural-schema pruning would drop."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, list):
        items = schema.get("items", {})
        return [p for i, item in enumerate(value) for p in pruned(item, items, f"{path}[{i}]")]
    if not isinstance(value, dict) or path == "/metadata":
        return []  # ObjectMeta is checked by the API server itself, not by the CRD
    declared = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    found: list[str] = []
    for key, sub in value.items():
        if key in declared:
            found += pruned(sub, declared[key], f"{path}/{key}")
        elif isinstance(extra, dict):
            found += pruned(sub, extra, f"{path}/{key}")
        elif extra is not True:
            found.append(f"{path}/{key}")
    return found


def check(obj: dict[str, Any], crd_path: Path | None, what: str = "InferenceService") -> None:
    """Raise ManifestError when ``obj`` fails the CRD at ``crd_path`` (no-op without a CRD)."""
    if crd_path is None:
        return
    found = problems(obj, load_schema(crd_path))
    if found:
        raise ManifestError(
            f"the {what} fails KServe's CRD schema ({crd_path.name}): {found[0]}",
            found,
            hint="this is a bug in the rendering or in the options given; nothing was sent",
        )
