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

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter, float32_tensors, native_frame, rename_outputs, select_column
from builder.errors import ConversionError, first_line
from builder.kinds import SCORE, SCORES, ModelKind
from builder.registry.signature import ModelInputs
from builder.tensors import TensorSpec

STRING_LOCALE = "C"
ML_OPSET = 3


def final_estimator(model: Any) -> Any:
    """The last step of a Pipeline (what decides classifier vs regressor), or the model."""
    steps = getattr(model, "steps", None)
    return steps[-1][1] if steps else model


def _estimator_type(estimator: Any) -> str | None:
    """scikit-learn's own word for what an estimator is ("classifier", "outlier_detector", ...);
    None for what is no scikit-learn estimator (a native LightGBM or XGBoost Booster)."""
    from sklearn.base import BaseEstimator
    from sklearn.utils import get_tags

    if not isinstance(estimator, BaseEstimator):
        return None
    return get_tags(estimator).estimator_type


def is_outlier_detector(model: Any) -> bool:
    return _estimator_type(final_estimator(model)) == "outlier_detector"


def is_classifier(model: Any) -> bool:
    """A classifier, with ``predict_proba`` or without (LinearSVC, RidgeClassifier, a hard
    VotingClassifier: their second output is the decision function)."""
    final = final_estimator(model)
    kind = _estimator_type(final)
    return kind != "outlier_detector" and (hasattr(final, "predict_proba") or kind == "classifier")


def has_probabilities(model: Any) -> bool:
    # available_if: an SVC without probability=True or a hard VotingClassifier has no attribute
    return hasattr(final_estimator(model), "predict_proba")


def has_decision_function(model: Any) -> bool:
    return hasattr(final_estimator(model), "decision_function")


def decision_2d(values: Any) -> np.ndarray:
    """decision_function as served: [N, 1] for a binary classifier or an outlier detector (one
    value per row), [N, C] otherwise."""
    values = np.asarray(values, dtype=np.float64)
    return values.reshape(len(values), -1)


def native_outputs(model: Any, x: Any) -> dict[str, np.ndarray]:
    """Native predictions keyed and shaped like the ONNX outputs of the sklearn-API converters."""
    if is_outlier_detector(model):
        return {
            "label": np.asarray(model.predict(x)).reshape(-1, 1),
            "score": decision_2d(model.decision_function(x)),
        }
    if is_classifier(model):
        out = {"label": np.asarray(model.predict(x)).reshape(-1, 1)}
        if has_probabilities(model):
            out["probabilities"] = np.asarray(model.predict_proba(x))
        elif has_decision_function(model):
            out["scores"] = decision_2d(model.decision_function(x))
        return out
    prediction = np.asarray(model.predict(x), dtype=np.float64)
    # One column per target: [N, 1] for a single target, [N, K] for a multi-target regressor.
    return {"prediction": prediction.reshape(len(prediction), -1)}


def describe_estimator(model: Any, flavor: str) -> ModelKind:
    """Classifier with its ``classes_``, outlier detector, or regressor, for any
    scikit-learn-API estimator. (A regressor's number of targets is read from its converted
    graph: ``with_targets``.)"""
    if is_outlier_detector(model):
        return ModelKind.outlier()
    if is_classifier(model):
        classes = getattr(final_estimator(model), "classes_", None)
        if classes is None:
            raise ConversionError(f"this {flavor} classifier has no classes_: is it fitted?")
        if not isinstance(classes, np.ndarray) or classes.ndim != 1:
            # MultiOutputClassifier: one classes_ array per label column
            raise ConversionError(
                f"{type(final_estimator(model)).__name__} predicts several label columns, each with "
                "its own classes; the serving contract has one label per row",
                hint="export one classifier per label column",
            )
        return ModelKind.classifier(
            classes, probabilities=has_probabilities(model), scores=has_decision_function(model)
        )
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
    library = "skl2onnx"

    def load(self, local_path: Path) -> Any:
        import mlflow.sklearn

        return mlflow.sklearn.load_model(str(local_path))

    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        return float32_tensors(inputs)

    def reads_columns_by_name(self, native: Any) -> bool:
        """A ColumnTransformer anywhere in the tree picks columns by name: skl2onnx then needs
        one input per column (the ``columns`` layout), not one matrix."""
        return any(cols is not None for _, cols in _walk(native))

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
        final = final_estimator(native)
        if is_classifier(native):
            # An empty entry where the converter has no zipmap (LinearSVC): skl2onnx's Pipeline
            # parser otherwise adds zipmap=True to a classifier step without options.
            options[id(final)] = {"zipmap": False} if "zipmap" in _allowed_options(final) else {}
        elif not is_outlier_detector(native):
            # One column per target: the graph is run once (normalize_outputs) to learn how many.
            final_types = [("prediction", FloatTensorType([None, None]))]
        for vectorizer in _text_vectorizers(native):
            options[id(vectorizer)] = {"locale": STRING_LOCALE}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # skl2onnx warns about opset/version pairs
                model = to_onnx(
                    native,
                    initial_types=[_initial_type(t) for t in inputs.tensors],
                    options=options,
                    # ai.onnx.ml 3 is skl2onnx's own default; said explicitly because the
                    # IsolationForest converter otherwise asks for 4, which skl2onnx then refuses.
                    target_opset={"": opset, "ai.onnx.ml": ML_OPSET},
                    final_types=final_types,
                )
        except ConversionError:
            raise
        except Exception as exc:  # skl2onnx's errors are every type (AssertionError, NameError, ...)
            raise ConversionError(
                f"skl2onnx cannot convert {self.model_name(native)}: {first_line(exc)}",
                hint=_hint(exc, opset),
            ) from exc
        return self._served_outputs(native, model)

    def _served_outputs(self, native: Any, model: onnx.ModelProto) -> onnx.ModelProto:
        """skl2onnx's outputs under the names of the serving contract (builder/kinds.py): an
        outlier detector's ``scores`` is its ``score``; a classifier without predict_proba has
        its decision function where the probabilities would be: ``scores``, one column for a
        binary classifier as decision_function returns it."""
        names = [o.name for o in model.graph.output]
        if is_outlier_detector(native) and len(names) == 2:
            return rename_outputs(model, {names[1]: SCORE})
        if not is_classifier(native) or has_probabilities(native) or len(names) != 2:
            return model
        if not has_decision_function(native):  # nothing to check it against, nothing to serve
            del model.graph.output[1]
            return model
        model = rename_outputs(model, {names[1]: SCORES})
        if len(getattr(final_estimator(native), "classes_", ())) == 2:
            # skl2onnx gives a binary classifier's decision either as one column, or as two:
            # [-d, d] for most, [d, -d] for libsvm's (SVC, NuSVC), whose decision is that of
            # classes_[0] vs classes_[1] in libsvm's own order.
            from sklearn.svm._base import BaseSVC

            first = isinstance(final_estimator(native), BaseSVC)
            model = select_column(model, SCORES, 0 if first else -1)
        return model

    def model_name(self, native: Any) -> str:
        what = type(native).__name__
        if what == "Pipeline":
            steps = " -> ".join(type(step).__name__ for _, step in native.steps)
            what = f"the Pipeline ({steps})"
        return what

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


def _allowed_options(estimator: Any) -> Any:
    """The options skl2onnx's converter of ``estimator`` takes (LinearSVC's has no zipmap: its
    outputs are plain tensors already); empty when it has no converter (to_onnx says so)."""
    from skl2onnx._supported_operators import sklearn_operator_name_map
    from skl2onnx.common._registration import get_converter

    try:
        return get_converter(sklearn_operator_name_map[type(estimator)]).get_allowed_options() or {}
    except (KeyError, ValueError):
        return {}


def _hint(exc: BaseException, opset: int) -> str:
    text = str(exc)
    needed = re.search(r"opset (\d+) < (\d+)", text)
    if needed:
        return f"export with --opset {needed.group(2)} (this export asked for opset {opset})"
    if "missing values are string" in text:
        # skl2onnx converts a string SimpleImputer only when its missing marker is a string.
        return (
            "a SimpleImputer over string columns converts with a string marker, e.g. "
            "SimpleImputer(missing_values='', strategy='constant', fill_value='missing'), "
            "with missing strings filled with '' before the model (what the gateway sends)"
        )
    return "use estimators skl2onnx supports, or register a converter for custom steps"
