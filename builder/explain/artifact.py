"""The explainer as a model of the repository: ``<model>_explain``, a Python-backend model with
the same inputs as the model, whose version folder holds ``model.py``, ``kernel.py``, the
arrays (``explainer.npz``) and, for a Pipeline, ``preprocess.onnx``; and ``want_explainer``,
which decides whether an export writes one (``--explain``/``--no-explain``, else the run's tag).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from builder import __version__
from builder.errors import UsageError
from builder.explain.build import Explainer
from builder.repository.names import validate_model_name
from builder.repository.triton_config import python_model_config, step_serving_options
from builder.repository.write import ModelArtifact
from builder.tensors import TensorSpec
from serving_contract import Explainer as ContractExplainer
from serving_contract import keys

if TYPE_CHECKING:
    from builder.export.context import ExportContext

_HERE = Path(__file__).parent
SUFFIX = "_explain"
CONTRIBUTIONS, BASE_VALUE = "contributions", "base_value"


def want_explainer(ctx: ExportContext) -> bool:
    """``--explain`` / ``--no-explain`` when given, else the training run's tag
    ``builder.explain`` (``true``/``false``), else no explainer."""
    if ctx.request.explain is not None:
        return ctx.request.explain
    raw = ctx.model.run_tags.get(keys.EXPLAIN_TAG)
    if raw is None:
        return False
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise UsageError(
            f"{ctx.model.ref}: run tag {keys.EXPLAIN_TAG}={raw!r} is not true or false",
            hint="set the tag to true or false, or pass --explain / --no-explain",
        )
    return value == "true"


def explainer_name(model: str) -> str:
    return validate_model_name(f"{model}{SUFFIX}", what="the explainer's model name")


def contract_explainer(name: str, explainer: Explainer) -> ContractExplainer:
    """What the model's serving contract says about its explainer."""
    return ContractExplainer(
        model=explainer_name(name),
        method=explainer.method,
        units=explainer.units,
        outputs=tuple(_plain(o) for o in explainer.outputs),
        contributions=CONTRIBUTIONS,
        base_value=BASE_VALUE,
    )


def explainer_artifact(ctx: ExportContext, explainer: Explainer, model_identity: str | None) -> ModelArtifact:
    """The explainer's config and version files; ``model_identity`` is the explained export's."""
    name = explainer_name(ctx.name)
    options = ctx.request.serving
    outputs = len(explainer.outputs)
    columns = len(explainer.columns)
    served = [
        TensorSpec(CONTRIBUTIONS, "float64", (-1, columns, outputs)),
        TensorSpec(BASE_VALUE, "float64", (-1, outputs)),
    ]
    explains = {
        keys.EXPLAINS_MODEL: ctx.name,
        keys.EXPLAINS_VERSION: ctx.version,
        keys.EXPLAINS_IDENTITY: model_identity,
    }
    config = python_model_config(
        name,
        ctx.inputs.tensors,
        served,
        max_batch_size=options.max_batch_size,
        parameters={keys.EXPLAINS: json.dumps(explains, sort_keys=True)},
        # Served on request only: no queue delay, one instance (the model keeps its own).
        options=step_serving_options(options),
    )
    buffer = io.BytesIO()
    np.savez(buffer, **explainer.arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle
    files = {
        "model.py": (_HERE / "backend" / "model.py").read_bytes(),
        "kernel.py": (_HERE / "kernel.py").read_bytes(),
        "explainer.npz": buffer.getvalue(),
    }
    if explainer.preprocess is not None:
        files["preprocess.onnx"] = explainer.preprocess.SerializeToString()
    digest = hashlib.sha256()
    for key in sorted(files):
        if key != "explainer.npz":  # npz (zip) bytes carry timestamps; the arrays are the content
            digest.update(files[key])
    for key in sorted(explainer.arrays):
        digest.update(key.encode() + np.ascontiguousarray(explainer.arrays[key]).tobytes())
    metadata: dict[str, Any] = {
        "builder_version": __version__,
        "explains": explains,
        "method": explainer.method,
        "units": explainer.units,
        "columns": list(explainer.columns),
        "outputs": [_plain(o) for o in explainer.outputs],
        "check": {"against": "shap", "rows": explainer.rows, "max_abs_err": explainer.max_abs_err},
        "source": {"uri": ctx.model.uri.raw, "version": ctx.model.version, "run_id": ctx.model.run_id},
    }
    identity = hashlib.sha256(f"{model_identity}:{digest.hexdigest()}".encode()).hexdigest()
    return ModelArtifact(name=name, config=config, version_files=files, metadata=metadata, identity=identity)


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
