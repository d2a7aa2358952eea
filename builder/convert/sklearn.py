"""scikit-learn estimators and Pipelines -> ONNX through skl2onnx.

Inputs follow the signature's layout (builder/registry/signature.py): one float matrix, one typed
input per DataFrame column (skl2onnx matches a ColumnTransformer's columns to inputs by
name), or the numpy array a model was trained on. Classifiers export ``label`` and
``probabilities`` as plain tensors (``zipmap: False``: a ZipMap gives a sequence of maps,
which Triton cannot carry); regressors export ``prediction``; clusterers (the KMeans family)
``label`` and ``distances`` (skl2onnx's ``scores`` of a KMeans are the distances to the centres).

Text vectorizers are converted with ``locale: "C"``: their StringNormalizer otherwise asks
for ``en_US.UTF-8``, which neither this machine nor the NGC Triton image has (onnxruntime
then refuses to load the graph; triton-inference-server/onnxruntime_backend issue 153);
onnxruntime builds ``C.UTF-8`` from it, which every glibc image has.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import (
    FlavorConverter,
    cast_input,
    float32_tensors,
    native_frame,
    rename_outputs,
    select_column,
)
from builder.convert.sklearn_gaps import convertible, known_cause, refuses_unseen
from builder.errors import ConversionError, first_line
from builder.kinds import DISTANCES, SCORE, SCORES, ModelKind
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


def is_clusterer(model: Any) -> bool:
    """KMeans, MiniBatchKMeans, ... (or a Pipeline ending in one): a label per row that is a
    cluster id, not a class."""
    return _estimator_type(final_estimator(model)) == "clusterer"


def _has_centre_distances(model: Any) -> bool:
    """A clusterer whose ``transform`` is the distance to each cluster centre (the KMeans
    family), which skl2onnx gives as its second output."""
    return hasattr(final_estimator(model), "cluster_centers_") and hasattr(model, "transform")


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
    if is_clusterer(model):
        if isinstance(x, np.ndarray) and x.dtype == np.float32:
            # the float32 rows Triton is sent, widened: KMeans fitted on float64 refuses float32
            x = x.astype(np.float64)
        out = {"label": np.asarray(model.predict(x)).reshape(-1, 1)}
        if _has_centre_distances(model):
            out[DISTANCES] = np.asarray(model.transform(x), dtype=np.float64)
        return out
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
    if is_clusterer(model):
        return _describe_clusterer(model)
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
    raise ConversionError(
        f"{type(final_estimator(model)).__name__} has neither predict nor predict_proba",
        hint="serve an estimator that predicts new rows (a transformer belongs inside a Pipeline "
        "that ends in one)",
    )


def _describe_clusterer(model: Any) -> ModelKind:
    final = final_estimator(model)
    name = type(final).__name__
    if not hasattr(final, "predict") and not hasattr(final, "transform"):
        # DBSCAN, AgglomerativeClustering, HDBSCAN, OPTICS, SpectralClustering: fit_predict only
        raise ConversionError(
            f"{name} labels only the rows it was fitted on (it has no predict for new rows)",
            hint="serve a clusterer that assigns new rows (KMeans, MiniBatchKMeans), or train a "
            f"classifier on {name}'s labels and serve that",
        )
    if not hasattr(final, "predict"):  # FeatureAgglomeration: a transformer of the columns
        raise ConversionError(
            f"{name} has no predict: it transforms the columns, it does not assign rows to clusters",
            hint="serve it inside a Pipeline that ends in an estimator that predicts",
        )
    centres = getattr(final, "cluster_centers_", None)
    clusters = len(centres) if centres is not None else None
    return ModelKind.cluster(clusters, distances=_has_centre_distances(model))


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


def _reads_inputs(model: Any) -> Iterator[tuple[Any, list[str] | None]]:
    """``_walk``, with the columns of the model's first step (or of the model itself) where no
    ColumnTransformer names them: the frame's columns it was fitted on (``feature_names_in_``),
    which are the model's own input columns."""
    first = _first_step(model)
    for est, cols in _walk(model):
        if cols is None and (est is model or est is first):
            names = getattr(est, "feature_names_in_", None)
            cols = [str(c) for c in names] if names is not None else None
        yield est, cols


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
        for est, cols in _reads_inputs(native):
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

    def known_values_only(self, native: Any, inputs: ModelInputs) -> dict[str, str]:
        # Not bool inputs: their rows are both values, whatever the encoder learned.
        names = {t.name for t in inputs.tensors if t.dtype != "bool"}
        names |= {c.name for c in inputs.columns if c.dtype != "bool"}
        closed: dict[str, str] = {}
        for est, cols in _reads_inputs(native):
            if refuses_unseen(est):
                for col in cols or ():
                    if col in names:
                        closed.setdefault(col, f"{type(est).__name__}(handle_unknown='error')")
        return closed

    def known_cause(self, native: Any, stage: str) -> str | None:
        return known_cause(_reads_inputs(native), stage)

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import DoubleTensorType, FloatTensorType

        native = convertible(native)
        options: dict[int, dict[str, Any]] = {}
        final_types = None
        final = final_estimator(native)
        if is_classifier(native):
            # An empty entry where the converter has no zipmap (LinearSVC): skl2onnx's Pipeline
            # parser otherwise adds zipmap=True to a classifier step without options.
            options[id(final)] = {"zipmap": False} if "zipmap" in _allowed_options(final) else {}
        elif not is_outlier_detector(native) and not is_clusterer(native):
            # One column per target: the graph is run once (normalize_outputs) to learn how many.
            final_types = [("prediction", FloatTensorType([None, None]))]
        for vectorizer in _text_vectorizers(native):
            options[id(vectorizer)] = {"locale": STRING_LOCALE}
        initial_types = [_initial_type(t) for t in inputs.tensors]

        def convert(types: list[tuple[str, Any]]) -> onnx.ModelProto:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # skl2onnx warns about opset/version pairs
                    return to_onnx(
                        native,
                        initial_types=types,
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
                    hint=_hint(exc, opset, native),
                ) from exc

        # skl2onnx computes KMeans distances as |x|^2 - 2x.c + |c|^2 in its input's precision,
        # which in float32 loses the digits that tell rows near a centre apart once features
        # are in the thousands (raw amounts, ages in days): the graph computes in double from
        # the float32 values Triton is sent, as scikit-learn does, where onnxruntime has double
        # kernels for every step (its Imputer has none: a SimpleImputer's Pipeline stays float32).
        in_double = is_clusterer(native) and all(t.dtype == "float32" for t in inputs.tensors)
        model = None
        if in_double:
            with contextlib.suppress(ConversionError):  # a step skl2onnx converts in float32 only
                model = convert([(n, DoubleTensorType(t.shape)) for n, t in initial_types])
        if model is None or not _runs(model):
            in_double, model = False, convert(initial_types)
        for tensor in inputs.tensors:
            if tensor.dtype == "bool":  # built for int64 (_initial_type): served as BOOL, cast
                model = cast_input(model, tensor.name, onnx.TensorProto.BOOL)
            elif in_double:  # built for double: served as FP32, cast
                model = cast_input(model, tensor.name, onnx.TensorProto.FLOAT)
        model = self._served_outputs(native, model)
        return _float32_outputs(model) if in_double else model

    def _served_outputs(self, native: Any, model: onnx.ModelProto) -> onnx.ModelProto:
        """skl2onnx's outputs under the names of the serving contract (builder/kinds.py): an
        outlier detector's ``scores`` is its ``score``, a clusterer's its ``distances``; a
        classifier without predict_proba has
        its decision function where the probabilities would be: ``scores``, one column for a
        binary classifier as decision_function returns it."""
        names = [o.name for o in model.graph.output]
        if is_outlier_detector(native) and len(names) == 2:
            return rename_outputs(model, {names[1]: SCORE})
        if is_clusterer(native) and len(names) == 2:  # KMeans' label and scores (the distances)
            if not _has_centre_distances(native):
                del model.graph.output[1]
                return model
            return rename_outputs(model, {names[1]: DISTANCES})
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


def _runs(model: onnx.ModelProto) -> bool:
    """Whether onnxruntime has a kernel for every node of ``model`` (it loads it)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime's own types: NotImplemented, Fail, InvalidGraph, ...
        return False
    return True


def _float32_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every double output of a graph computed in double, cast to FP32 (the serving contract's
    float type) as its last step."""
    graph = model.graph
    for out in graph.output:
        if out.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE:
            name, inner = out.name, f"{out.name}__double"
            rename_outputs(model, {name: inner})
            graph.node.append(onnx.helper.make_node("Cast", [inner], [name], to=onnx.TensorProto.FLOAT))
            out.name = name
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


def _initial_type(tensor: TensorSpec) -> tuple[str, Any]:
    from skl2onnx.common.data_types import (
        DoubleTensorType,
        FloatTensorType,
        Int64TensorType,
        StringTensorType,
    )

    types = {
        "float32": FloatTensorType,
        "float64": DoubleTensorType,
        "int64": Int64TensorType,
        # skl2onnx's converters take no bool input (its OneHotEncoder refuses BooleanTensorType);
        # scikit-learn reads a bool column as 0/1 everywhere (a bool encoder's categories
        # [False, True] are [0, 1]), so the graph is built for int64 and the BOOL input the
        # signature declares is cast to it (to_onnx).
        "bool": Int64TensorType,
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


def _hint(exc: BaseException, opset: int, native: Any) -> str:
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
    return (
        known_cause(_reads_inputs(native), "convert")
        or "use estimators skl2onnx supports, or register a converter for custom steps"
    )
