"""scikit-learn estimators and Pipelines -> ONNX through skl2onnx.

Inputs follow the signature's layout (builder/registry/signature.py): one float matrix, one typed
input per DataFrame column (skl2onnx matches a ColumnTransformer's columns to inputs by
name), or the numpy array a model was trained on. Classifiers export ``label`` and
``probabilities`` as plain tensors (``zipmap: False``: a ZipMap gives a sequence of maps,
which Triton cannot carry); regressors export ``prediction``.

Text vectorizers are converted with ``locale: "C"``: their StringNormalizer otherwise asks
for ``en_US.UTF-8``, which neither this machine nor the NGC Triton image has (onnxruntime
then refuses to load the graph; triton-inference-server/onnxruntime_backend issue 153);
onnxruntime builds ``C.UTF-8`` from it, which every glibc image has.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter, float32_tensors, native_frame
from builder.errors import ConversionError, first_line
from builder.kinds import ModelKind
from builder.registry.signature import ModelInputs
from builder.tensors import TensorSpec

STRING_LOCALE = "C"


def final_estimator(model: Any) -> Any:
    """The last step of a Pipeline (what decides classifier vs regressor), or the model."""
    steps = getattr(model, "steps", None)
    return steps[-1][1] if steps else model


def is_classifier(model: Any) -> bool:
    return hasattr(final_estimator(model), "predict_proba")


def native_outputs(model: Any, x: Any) -> dict[str, np.ndarray]:
    """Native predictions keyed and shaped like the ONNX outputs of the sklearn-API converters."""
    if is_classifier(model):
        return {
            "label": np.asarray(model.predict(x)).reshape(-1, 1),
            "probabilities": np.asarray(model.predict_proba(x)),
        }
    return {"prediction": np.asarray(model.predict(x), dtype=np.float64).reshape(-1, 1)}


def describe_estimator(model: Any, flavor: str) -> ModelKind:
    """Classifier with its ``classes_``, or regressor, for any scikit-learn-API estimator."""
    if is_classifier(model):
        classes = getattr(final_estimator(model), "classes_", None)
        if classes is None:
            raise ConversionError(f"this {flavor} classifier has no classes_: is it fitted?")
        return ModelKind.classifier(classes)
    if hasattr(final_estimator(model), "predict"):
        return ModelKind.regressor()
    raise ConversionError(f"{type(final_estimator(model)).__name__} has neither predict nor predict_proba")


def _walk(model: Any) -> Iterator[tuple[Any, list[str] | None]]:
    """Every estimator in a Pipeline/ColumnTransformer tree, with the columns it reads when a
    ColumnTransformer names them (None: the columns its parent passes)."""
    yield model, None
    for _, step in getattr(model, "steps", None) or []:
        yield from _walk(step)
    # A fitted ColumnTransformer's own fitted copies are in transformers_ (transformers holds
    # the unfitted originals).
    fitted = getattr(model, "transformers_", None) or getattr(model, "transformers", None) or []
    for _, transformer, cols in fitted:
        if isinstance(transformer, str):  # "drop" / "passthrough"
            continue
        picked = [cols] if isinstance(cols, str) else list(cols) if _is_names(cols) else None
        for inner, inner_cols in _walk(transformer):
            yield inner, inner_cols if inner_cols is not None else picked


def _is_names(cols: Any) -> bool:
    return isinstance(cols, list | tuple) and all(isinstance(c, str) for c in cols)


def _text_vectorizers(model: Any) -> list[Any]:
    return [est for est, _ in _walk(model) if hasattr(est, "vocabulary_") and hasattr(est, "build_analyzer")]


def _first_step(model: Any) -> Any:
    steps = getattr(model, "steps", None)
    return steps[0][1] if steps else model


class SklearnConverter(FlavorConverter):
    flavor = "sklearn"

    def load(self, local_path: Path) -> Any:
        import mlflow.sklearn

        return mlflow.sklearn.load_model(str(local_path))

    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        return float32_tensors(inputs)

    def describe(self, native: Any, inputs: ModelInputs) -> ModelKind:
        return describe_estimator(native, "scikit-learn")

    def vocabulary(self, native: Any, inputs: ModelInputs) -> dict[str, tuple[Any, ...]]:
        strings = [t.name for t in inputs.tensors if t.dtype == "string"]
        words: dict[str, list[Any]] = {t.name: [] for t in inputs.tensors if t.dtype in ("string", "int64")}
        for est, cols in _walk(native):
            targets = [c for c in (cols or strings) if c in strings]
            categories = getattr(est, "categories_", None)
            if categories is not None and cols is not None:
                for col, cats in zip(cols, categories, strict=False):
                    if col in words:  # string and integer categories (NaN is no category)
                        words[col] += [c.item() if hasattr(c, "item") else c for c in cats if c == c]
            vocab = getattr(est, "vocabulary_", None)
            if isinstance(vocab, dict):
                # A few documents made of learned words (and one of words in a different case
                # and order): what a vectorizer sees in production, unlike random characters.
                terms = sorted(vocab, key=lambda t: vocab[t])[:200]
                docs = [" ".join(terms[i : i + 4]) for i in range(0, len(terms), 4)]
                docs += [" ".join(reversed(terms[:6])).upper()]
                for col in targets:
                    words[col] += docs
        return {name: tuple(dict.fromkeys(values)) for name, values in words.items() if values}

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType

        options: dict[int, dict[str, Any]] = {}
        final_types = None
        if is_classifier(native):
            options[id(final_estimator(native))] = {"zipmap": False}
        else:
            final_types = [("prediction", FloatTensorType([None, 1]))]
        for vectorizer in _text_vectorizers(native):
            options[id(vectorizer)] = {"locale": STRING_LOCALE}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # skl2onnx warns about opset/version pairs
                model = to_onnx(
                    native,
                    initial_types=[_initial_type(t) for t in inputs.tensors],
                    options=options,
                    target_opset=opset,
                    final_types=final_types,
                )
        except (RuntimeError, NotImplementedError, TypeError, ValueError, KeyError) as exc:
            what = type(native).__name__
            if what == "Pipeline":
                steps = " -> ".join(type(step).__name__ for _, step in native.steps)
                what = f"the Pipeline ({steps})"
            raise ConversionError(
                f"skl2onnx cannot convert {what}: {first_line(exc)}", hint=_hint(exc)
            ) from exc
        return model

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        x = native_frame(feeds, inputs)
        if inputs.layout == "columns" and len(inputs.columns) == 1 and _text_vectorizers(_first_step(native)):
            # A Pipeline that starts with a vectorizer was fitted on a sequence of documents,
            # not on a one-column frame (which it would read as the column's name).
            x = x[inputs.columns[0].name]
        return native_outputs(native, x)


def _initial_type(tensor: TensorSpec) -> tuple[str, Any]:
    from skl2onnx.common.data_types import (
        BooleanTensorType,
        DoubleTensorType,
        FloatTensorType,
        Int64TensorType,
        StringTensorType,
    )

    types = {
        "float32": FloatTensorType,
        "float64": DoubleTensorType,
        "int64": Int64TensorType,
        "bool": BooleanTensorType,
        "string": StringTensorType,
    }
    if tensor.dtype not in types or len(tensor.shape) != 2:
        raise ConversionError(
            f"input {tensor.name!r} is {tensor.dtype} of shape {list(tensor.shape)}; scikit-learn "
            "models take 2-D float, int64, bool or string inputs",
            hint="log the model with a DataFrame input example, or a 2-D float array",
        )
    return tensor.name, types[tensor.dtype]([None, tensor.shape[1] if tensor.shape[1] > 0 else None])


def _hint(exc: BaseException) -> str:
    text = str(exc)
    if "missing values are string" in text:
        # skl2onnx converts a string SimpleImputer only when its missing marker is a string.
        return (
            "a SimpleImputer over string columns converts with a string marker, e.g. "
            "SimpleImputer(missing_values='', strategy='constant', fill_value='missing'), "
            "with missing strings filled with '' before the model (what the gateway sends)"
        )
    return "use estimators skl2onnx supports, or register a converter for custom steps"
