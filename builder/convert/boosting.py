"""XGBoost and LightGBM models -> ONNX through onnxmltools: native boosters (``xgboost.train``,
``lightgbm.train``) and scikit-learn-API estimators (``XGBClassifier``, ``LGBMRegressor``, ...).

What a booster is comes from its objective, read from the booster itself (a native booster has
no ``predict_proba`` or ``classes_``): binary and multi-class objectives become classifiers over
classes ``0..C-1``, regression objectives regressors. Objectives the converters cannot express
faithfully are refused before conversion, each with the reason found by checking onnxmltools'
output against the booster (xgboost 3.2, lightgbm 4.7, onnxmltools 1.16): see the tables below.

onnxmltools' tree converters support opsets up to 15 (a higher target fails with "higher than
... the converter support"), so these models are exported at opset 15 whatever is asked.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builder.convert.base import FlavorConverter, float32_tensors, native_frame, rename_outputs
from builder.convert.sklearn import describe_estimator, native_outputs
from builder.errors import ConversionError, first_line
from builder.kinds import LABEL, PREDICTION, PROBABILITIES, ModelKind
from builder.registry.signature import ModelInputs

TREE_OPSET = 15
# onnxmltools names a regressor's output "variable".
_ONNX_NAMES = {"variable": PREDICTION}
_CONTRACT_HINT = "the serving contract has classifiers and regressors: train with a binary, multi-class "
_RANKING = "a ranking objective answers scores that order items within a query, not classes or values"

# Objective -> kind, for objectives whose conversion matches the booster's predictions.
XGBOOST_OBJECTIVES = {
    "binary:logistic": "binary",
    "multi:softprob": "multiclass",
    **dict.fromkeys(
        (
            "reg:squarederror",
            "reg:squaredlogerror",
            "reg:absoluteerror",
            "reg:pseudohubererror",
            "reg:quantileerror",
            "count:poisson",
            "reg:tweedie",
            "reg:gamma",
        ),
        "regression",
    ),
}
# Objective (or prefix, ending in ":") -> (why it is refused, hint).
XGBOOST_REFUSED = {
    "multi:softmax": (
        "the booster answers class indices only, and onnxmltools' probabilities for it are not "
        "the softmax of its margins",
        "train with multi:softprob (same trees; the label is the argmax of its probabilities)",
    ),
    "binary:logitraw": (
        "the booster answers raw margins where the ONNX graph answers probabilities",
        "train with binary:logistic",
    ),
    "binary:hinge": ("onnxmltools does not reproduce its 0/1 output", "train with binary:logistic"),
    "reg:logistic": (
        "onnxmltools does not apply its sigmoid",
        "train with binary:logistic for 0/1 labels, or reg:squarederror",
    ),
    "rank:": (_RANKING, _CONTRACT_HINT + "or reg:* one"),
    "survival:": ("onnxmltools does not convert survival objectives", _CONTRACT_HINT + "or reg:* one"),
}
LIGHTGBM_OBJECTIVES = {
    "binary": "binary",
    "multiclass": "multiclass",
    **dict.fromkeys(
        ("regression", "regression_l1", "huber", "quantile", "poisson", "tweedie", "gamma"), "regression"
    ),
}
LIGHTGBM_REFUSED = {
    "multiclassova": (
        "its ONNX probabilities are a softmax where the booster's are one sigmoid per class",
        "train with objective='multiclass'",
    ),
    **dict.fromkeys(("lambdarank", "rank_xendcg"), (_RANKING, _CONTRACT_HINT + "or regression one")),
    "custom": (
        "the saved model of a custom objective does not say how its raw scores become predictions",
        "train with a built-in objective (binary, multiclass, regression, ...)",
    ),
}
_LIGHTGBM_UNSUPPORTED_HINT = "onnxmltools converts " + ", ".join(sorted(LIGHTGBM_OBJECTIVES))


def refuse_string_columns(inputs: ModelInputs, library: str) -> None:
    """Tree converters take one float matrix: a DataFrame signature with a string column
    (a pandas category, or text) has no ONNX form here."""
    strings = [c.name for c in inputs.columns if c.dtype == "string"] if inputs.layout == "columns" else []
    if strings:
        raise ConversionError(
            f"input column {strings[0]!r} is a string column; {library}'s ONNX converter takes numbers only",
            hint=f"encode categories as numbers before the {library} model (e.g. an integer code per "
            "category) and log it again",
        )


def kind_of(objective_kind: str, num_class: int) -> ModelKind:
    if objective_kind == "binary":
        return ModelKind.classifier(range(2))
    if objective_kind == "multiclass":
        return ModelKind.classifier(range(num_class))
    return ModelKind.regressor()


def classifier_outputs(probabilities: np.ndarray, classes: tuple[Any, ...] | None) -> dict[str, np.ndarray]:
    """Label and probabilities shaped like the ONNX outputs; the label is the most likely class."""
    labels = np.asarray(classes if classes is not None else range(probabilities.shape[1]))
    return {LABEL: labels[np.argmax(probabilities, axis=1)].reshape(-1, 1), PROBABILITIES: probabilities}


def _booster_outputs(kind: ModelKind, raw: np.ndarray) -> dict[str, np.ndarray]:
    """A native booster's ``predict`` (probability of class 1, class probabilities, or values)
    as the ONNX outputs."""
    raw = np.asarray(raw)
    if kind.kind == "binary":
        positive = raw.reshape(-1)
        return classifier_outputs(np.stack([1.0 - positive, positive], axis=1), kind.classes)
    if kind.kind == "multiclass":
        return classifier_outputs(raw.reshape(raw.shape[0], -1), kind.classes)
    return {PREDICTION: raw.astype(np.float64).reshape(-1, 1)}


def _check_objective(
    objective: str, supported: dict[str, str], refused: dict[str, tuple[str, str]], library: str, hint: str
) -> str:
    """The objective's kind, or a ConversionError naming it and why it has no faithful ONNX form."""
    if objective in supported:
        return supported[objective]
    for key, (why, fix) in refused.items():
        if objective == key or (key.endswith(":") and objective.startswith(key)):
            raise ConversionError(f"{library} objective {objective!r} is not exported: {why}", hint=fix)
    raise ConversionError(
        f"{library} objective {objective!r} is not exported: onnxmltools has no faithful conversion of it",
        hint=hint,
    )


class _BoostingConverter(FlavorConverter):
    library: str

    def served_inputs(self, inputs: ModelInputs) -> ModelInputs:
        return float32_tensors(inputs)

    def describe(self, native: Any, inputs: ModelInputs) -> ModelKind:
        refuse_string_columns(inputs, self.library)
        objective_kind, num_class = self._objective(native)
        if self._is_native(native):
            return kind_of(objective_kind, num_class)
        kind = describe_estimator(native, self.flavor)
        if (kind.kind == "regression") != (objective_kind == "regression"):
            raise ConversionError(
                f"this {type(native).__name__} has a {objective_kind} objective, which its "
                f"scikit-learn API does not answer as a {kind.kind} model",
                hint=f"use the {self.library} estimator class that matches the objective",
            )
        return kind

    def predict(
        self, native: Any, feeds: dict[str, np.ndarray], inputs: ModelInputs
    ) -> dict[str, np.ndarray]:
        x = native_frame(feeds, inputs)
        if not self._is_native(native):
            return native_outputs(native, x)
        objective_kind, num_class = self._objective(native)
        return _booster_outputs(kind_of(objective_kind, num_class), self._booster_predict(native, x))

    def _is_native(self, native: Any) -> bool:
        raise NotImplementedError

    def _objective(self, native: Any) -> tuple[str, int]:
        """(kind of the objective, number of classes), refusing what cannot be exported."""
        raise NotImplementedError

    def _booster_predict(self, booster: Any, x: Any) -> np.ndarray:
        raise NotImplementedError

    def _convert(self, convert: Any, native: Any, inputs: ModelInputs, **kwargs: Any) -> onnx.ModelProto:
        from onnxmltools.convert.common.data_types import FloatTensorType

        if len(inputs.tensors) != 1 or len(inputs.tensors[0].shape) != 2:
            raise ConversionError(f"{self.flavor} models take one 2-D input; the signature has others")
        (tensor,) = inputs.tensors
        width = tensor.shape[1] if tensor.shape[1] > 0 else None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = convert(
                    native,
                    initial_types=[(tensor.name, FloatTensorType([None, width]))],
                    target_opset=TREE_OPSET,
                    **kwargs,
                )
        except Exception as exc:  # onnxmltools raises bare RuntimeError/ValueError/AttributeError
            raise ConversionError(
                f"onnxmltools cannot convert this {self.flavor} model: {first_line(exc, 200)}",
                hint="objectives with ONNX support: binary/multiclass classification, regression",
            ) from exc
        return rename_outputs(model, _ONNX_NAMES)


class XGBoostConverter(_BoostingConverter):
    flavor = "xgboost"
    library = "XGBoost"

    def load(self, local_path: Path) -> Any:
        import mlflow.xgboost

        return mlflow.xgboost.load_model(str(local_path))

    def _is_native(self, native: Any) -> bool:
        return not hasattr(native, "get_booster")

    def _booster(self, native: Any) -> Any:
        return native if self._is_native(native) else native.get_booster()

    def _objective(self, native: Any) -> tuple[str, int]:
        learner = json.loads(self._booster(native).save_config())["learner"]
        objective = str(learner["objective"]["name"])
        params = learner.get("learner_model_param", {})
        if int(params.get("num_target", 1)) > 1:
            raise ConversionError(
                f"XGBoost objective {objective!r} with {params['num_target']} targets is not exported: "
                "onnxmltools converts one output per row",
                hint="train one booster per target (or per quantile)",
            )
        hint = "supported: " + ", ".join(XGBOOST_OBJECTIVES)
        kind = _check_objective(objective, XGBOOST_OBJECTIVES, XGBOOST_REFUSED, self.library, hint)
        return kind, int(params.get("num_class", 0))

    def _booster_predict(self, booster: Any, x: Any) -> np.ndarray:
        import xgboost

        # A DMatrix built from the array with the booster's own feature names and types: a
        # DataFrame's names would not match a booster trained on a bare array.
        values = x.to_numpy() if hasattr(x, "to_numpy") else np.asarray(x)
        types = booster.feature_types
        matrix = xgboost.DMatrix(
            values,
            feature_names=booster.feature_names,
            feature_types=types,
            enable_categorical=bool(types and "c" in types),
        )
        return np.asarray(booster.predict(matrix))

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        from onnxmltools import convert_xgboost

        # The converter reads split features as f0, f1, ...; a model fitted on a DataFrame
        # carries column names instead, so convert a copy whose booster has none.
        stripped = copy.deepcopy(native)
        self._booster(stripped).feature_names = None
        return self._convert(convert_xgboost, stripped, inputs)


class LightGBMConverter(_BoostingConverter):
    flavor = "lightgbm"
    library = "LightGBM"

    def load(self, local_path: Path) -> Any:
        import mlflow.lightgbm

        return mlflow.lightgbm.load_model(str(local_path))

    def _is_native(self, native: Any) -> bool:
        return not hasattr(native, "booster_")

    def _objective(self, native: Any) -> tuple[str, int]:
        booster = native if self._is_native(native) else native.booster_
        # The saved model's objective line ("binary sigmoid:1", "multiclass num_class:3") is the
        # canonical name whatever alias was trained with; a custom objective leaves none.
        header = booster.dump_model(num_iteration=1)
        objective = str(header.get("objective") or booster.params.get("objective") or "custom").split()[0]
        kind = _check_objective(
            objective, LIGHTGBM_OBJECTIVES, LIGHTGBM_REFUSED, self.library, _LIGHTGBM_UNSUPPORTED_HINT
        )
        return kind, int(header.get("num_class", 1))

    def _booster_predict(self, booster: Any, x: Any) -> np.ndarray:
        return np.asarray(booster.predict(x))

    def vocabulary(self, native: Any, inputs: ModelInputs) -> dict[str, tuple[Any, ...]]:
        """The categories of each categorical feature (``categorical_feature=``), by input
        column name: the booster's ``feature_infos`` list the category codes seen in training.
        Negative codes are LightGBM's missing value, not a category."""
        booster = native if self._is_native(native) else native.booster_
        try:
            infos = booster.dump_model(num_iteration=1).get("feature_infos", {})
        except Exception:  # a booster that cannot dump itself just has no categories to offer
            return {}
        names = list(inputs.feature_names or ())
        learned: dict[str, tuple[Any, ...]] = {}
        for i, (feature, info) in enumerate(infos.items()):
            codes = sorted({int(v) for v in (info or {}).get("values") or () if int(v) >= 0})
            if codes:
                learned[names[i] if i < len(names) else feature] = tuple(codes)
        return learned

    def to_onnx(self, native: Any, inputs: ModelInputs, opset: int) -> onnx.ModelProto:
        from onnxmltools import convert_lightgbm

        return self._convert(convert_lightgbm, native, inputs, zipmap=False)
