"""Running one case of the support matrix: fit, log into MLflow, export, and name the outcome.

A case is run as a user runs it: fitted in their code, logged with an input example, and
exported with ``builder export``. Warnings are warnings there (fitting warns about convergence,
MLflow and the converters about their own deprecations), so each step runs with warnings
silenced, not turned into errors as the rest of the test session does.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import BuilderError
from builder.export import ExportRequest, export_model
from tests.builder.support_matrix import data
from tests.builder.support_matrix.cases import Case, NotTried

EXPORTED = "exported"
REFUSED = "refused"
NOT_TRIED = "not tried"
CRASHED = "crashed"  # export_model raised something that is not a BuilderError: a builder bug
STATUSES = (EXPORTED, REFUSED, NOT_TRIED, CRASHED)
PARITY_ROWS = 16
DETAIL_LIMIT = 160


@dataclass(frozen=True)
class Outcome:
    status: str
    reason: str = ""  # a short category
    detail: str = ""  # the first error line, normalised and shortened
    # A refusal's breaches of the error contract (docs/errors.md): no model name, no hint.
    contract: tuple[str, ...] = field(default=(), compare=False)

    @property
    def cell(self) -> str:
        return self.status if not self.reason else f"{self.status}: {self.reason}"


# (pattern on "<ErrorClass>: <message>", category), first match wins; render.CATEGORY_NOTES says
# which categories are the builder's bugs and which the converters' limits.
CATEGORIES = (
    (r"Unable to find a shape calculator", "skl2onnx has no converter"),
    (
        r"is not supported unless|encoding not supported|flatten_transform",
        "skl2onnx cannot convert these options",
    ),
    (r"computes a different model", "the converter computes a different model"),
    (r"ONNX Runtime cannot (load|run)", "ONNX Runtime cannot run the converted graph"),
    (r"predicts several label columns", "several label columns per row"),
    (r"opset \d+ < \d+", "needs a newer opset"),
    (r"Number of declared outputs is unexpected", "skl2onnx cannot convert: declared outputs differ"),
    (r"Unable to find column name", "skl2onnx cannot convert: columns merged into one input"),
    (r"ONNX shape .* differs from the original", "shape error"),
    (r"native model failed on the parity rows", "native model fails on the parity rows"),
    (r"^ParityError", "parity failed"),
    (r"CatBoost model has categorical features", "CatBoost exports no categorical features"),
    (r"without a signature", "no signature"),
)


def categorise(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    for pattern, category in CATEGORIES:
        if re.search(pattern, text):
            return category
    return type(error).__name__


def first_line(error: BaseException) -> str:
    """The first line of an error, without what changes between runs (ids, paths, addresses)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"\b[0-9a-f]{32}\b", "<run>", text)
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    text = re.sub(r"(/[\w.+-]+)+/", "…/", text)
    text = re.sub(r"\bsm_\d{3}\b", "<model>", text)
    text = re.sub(r"(\d\.\d)\d+(e[-+]\d+)?", r"\1…\2", text)  # floats differ in their last digits
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


def contract_breaches(error: BuilderError, model: str) -> tuple[str, ...]:
    """What a refusal lacks of the contract: the model's name in its one line, and a hint."""
    breaches = []
    if model not in error.message.splitlines()[0]:
        breaches.append("the error line does not name the model")
    if not error.hint:
        breaches.append("no hint")
    return tuple(breaches)


def fit(case: Case) -> tuple[Any, Any]:
    """The fitted model and its training features; NotTried when it cannot be built or fitted."""
    X, y = data.features(case.shape), data.target(case.target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = case.build()
        try:
            model.fit(X, **case.fit_params) if y is None else model.fit(X, y, **case.fit_params)
        except Exception as exc:
            raise NotTried(f"cannot be fitted on this data ({type(exc).__name__})") from exc
    return model, X


def _skops_trusted_types(model: Any) -> list[str]:
    """The types a user lists in ``skops_trusted_types`` (what skops itself says it would refuse)."""
    import skops.io

    return skops.io.get_untrusted_types(data=skops.io.dumps(model))


def log(case: Case, model: Any, X: Any, artifact: str) -> None:
    """Log the model into the active run as ``artifact``, with an input example."""
    import mlflow

    flavor = getattr(mlflow, case.flavor)
    logged, how = case.to_log(model, X) if case.to_log is not None else (model, {})
    kwargs: dict[str, Any] = {
        "name": artifact,
        "input_example": data.example(X),
        "pip_requirements": [],  # given: inference imports every library in the process, slowly
        **how,
    }
    if case.flavor == "sklearn":
        kwargs["skops_trusted_types"] = _skops_trusted_types(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            flavor.log_model(logged, **kwargs)
        except Exception as exc:
            raise NotTried(f"MLflow cannot log it ({type(exc).__name__})") from exc


def export(run_id: str, artifact: str, repo: Path) -> Outcome:
    request = ExportRequest(f"runs:/{run_id}/{artifact}", repo, name=artifact, parity_rows=PARITY_ROWS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            export_model(request)
        except BuilderError as exc:
            return Outcome(REFUSED, categorise(exc), first_line(exc), contract_breaches(exc, artifact))
        except Exception as exc:  # a leaked third-party exception is a bug of the builder
            return Outcome(CRASHED, type(exc).__name__, first_line(exc))
    return Outcome(EXPORTED)


def run_case(case: Case, run_id: str, artifact: str, repo: Path) -> Outcome:
    """Fit, log (into the active run ``run_id``) and export one case."""
    try:
        model, X = fit(case)
        log(case, model, X, artifact)
    except NotTried as exc:
        cause = exc.__cause__
        return Outcome(NOT_TRIED, str(exc), first_line(cause) if cause is not None else "")
    return export(run_id, artifact, repo)
