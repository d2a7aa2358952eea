"""Model URIs the builder accepts, parsed once into a typed value.

MLflow's own forms, so a URI copied from the MLflow UI works unchanged:
``models:/NAME@ALIAS``, ``models:/NAME/VERSION`` and ``runs:/RUN_ID/ARTIFACT_PATH``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder.errors import UsageError

_HINT = "use models:/NAME@ALIAS, models:/NAME/VERSION or runs:/RUN_ID/PATH"
_RUN_ID = re.compile(r"^[0-9a-zA-Z_-]+$")


@dataclass(frozen=True)
class ModelURI:
    """A parsed model URI: exactly one of (name + alias), (name + version), (run_id + path)."""

    raw: str
    name: str | None = None
    alias: str | None = None
    version: int | None = None
    run_id: str | None = None
    artifact_path: str | None = None

    @property
    def is_registry(self) -> bool:
        return self.name is not None


def parse_model_uri(uri: str) -> ModelURI:
    """Parse ``uri`` or raise UsageError saying which part is wrong."""
    text = uri.strip()
    if text.startswith("models:/"):
        rest = text[len("models:/") :].strip("/")
        if "@" in rest:
            name, _, alias = rest.partition("@")
            if not name or not alias or "/" in alias:
                raise UsageError(f"malformed model URI {uri!r}: expected models:/NAME@ALIAS", hint=_HINT)
            return ModelURI(raw=text, name=name, alias=alias)
        name, sep, version = rest.rpartition("/")
        if not sep or not name:
            raise UsageError(f"model URI {uri!r} names no version or alias", hint=_HINT)
        if version.lower() == "latest":
            raise UsageError(
                f"model URI {uri!r}: 'latest' is ambiguous in a release pipeline",
                hint="name the version (models:/NAME/3) or an alias (models:/NAME@champion)",
            )
        if not version.isdigit() or int(version) < 1:
            raise UsageError(f"model URI {uri!r}: version {version!r} is not a positive integer", hint=_HINT)
        return ModelURI(raw=text, name=name, version=int(version))
    if text.startswith("runs:/"):
        rest = text[len("runs:/") :].strip("/")
        run_id, _, path = rest.partition("/")
        if not run_id or not path or not _RUN_ID.match(run_id):
            raise UsageError(f"malformed run URI {uri!r}: expected runs:/RUN_ID/PATH", hint=_HINT)
        return ModelURI(raw=text, run_id=run_id, artifact_path=path)
    raise UsageError(f"unsupported model URI {uri!r}", hint=_HINT)
