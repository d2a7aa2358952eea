"""The cases of the support matrix: which model, on which input shape, in which table cell.

Six tables:

- ``classifiers``, ``regressors``, ``outlier detectors``, ``clusterers`` (those with
  ``predict``): every estimator ``sklearn.utils.all_estimators`` lists of that type, on the
  numeric DataFrame; the
  representative set ``REPRESENTATIVE`` also on the other input shapes (data.SHAPES); the
  clusterers also as a Pipeline of a StandardScaler and a KMeans.
- ``transformers``: a Pipeline of one transformer and a final LogisticRegression (binary
  target), on the input shape the transformer is for.
- ``boosters``: XGBoost, LightGBM and CatBoost with a few objectives, when installed.
- ``ONNX models``: scikit-learn models converted by the user with skl2onnx (float32 rows, with
  and without its default ZipMap output) and logged with ``mlflow.onnx``, on the DataFrame
  and the numpy array.
- ``Keras models``: small Keras 3 models (TensorFlow backend), when installed: a Sequential of
  Dense layers on the numpy array (``mlflow.tensorflow`` and ``mlflow.keras``), and on the
  integer-coded categories a functional model of two inputs (the numerics, and the codes into
  an ``Embedding``) and a Sequential ``Embedding`` over the codes alone.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.builder.support_matrix import data

CLASSIFIERS = "classifiers"
REGRESSORS = "regressors"
OUTLIERS = "outlier detectors"
CLUSTERERS = "clusterers"
TRANSFORMERS = "transformers"
BOOSTERS = "boosters"
ONNX = "ONNX models (mlflow.onnx)"
KERAS = "Keras models (mlflow.tensorflow, mlflow.keras)"
TABLES = (CLASSIFIERS, REGRESSORS, OUTLIERS, CLUSTERERS, TRANSFORMERS, BOOSTERS, ONNX, KERAS)

# A few of each family (linear, trees, bagged and boosted trees, SVM, neighbours, naive Bayes,
# neural network), on every input shape: the other estimators of a family share its converter
# and its input handling, so they would repeat its row.
REPRESENTATIVE = {
    "LogisticRegression",
    "Ridge",
    "DecisionTreeClassifier",
    "RandomForestRegressor",
    "GradientBoostingClassifier",
    "HistGradientBoostingClassifier",
    "HistGradientBoostingRegressor",
    "SVC",
    "KNeighborsRegressor",
    "GaussianNB",
    "MLPClassifier",
    "KMeans",
}
# Regressors that only fit a 2-column target; ``MULTI_OUTPUT_EXTRA`` also get a 2-target row.
TWO_TARGETS_ONLY = {
    "CCA",
    "MultiOutputRegressor",
    "MultiTaskElasticNet",
    "MultiTaskElasticNetCV",
    "MultiTaskLasso",
    "MultiTaskLassoCV",
    "PLSCanonical",
    "RegressorChain",
}
MULTI_OUTPUT_EXTRA = ("Ridge", "RandomForestRegressor", "KNeighborsRegressor")
MULTICLASS_EXTRA = ("LogisticRegression", "RandomForestClassifier", "GaussianNB")
TWO_LABELS_ONLY = {"ClassifierChain", "MultiOutputClassifier"}
NOT_TRIED = {
    "IsotonicRegression": "fits one feature only",
    "Birch": "skops, MLflow's default format, cannot save it",
}
# Meta-estimators whose `estimator` defaults to None and then refuses to fit.
ESTIMATOR_DEFAULTS_TO_NONE = {"SelfTrainingClassifier"}
# Constructor arguments without which an estimator cannot be served (named in its row).
SPECIAL_ARGS: dict[str, dict[str, Any]] = {
    "LocalOutlierFactor": {"novelty": True},  # the default novelty=False has no predict()
}


class NotTried(Exception):
    """The case is listed, not run: the reason is the message."""


@dataclass(frozen=True)
class Case:
    table: str
    row: str
    column: str
    shape: str  # data.SHAPES
    target: str  # data.BINARY, ...
    flavor: str  # the MLflow flavor it is logged with
    build: Callable[[], Any]  # a fresh unfitted model; raises NotTried
    fit_params: dict[str, Any] = field(default_factory=dict)
    # What is logged and how, from the fitted model and its training features (None: the model
    # itself, with data.example as its input example): for the onnx flavor, the ONNX graph a
    # user converts it to and log_model's input_example and signature.
    to_log: Callable[[Any, Any], tuple[Any, dict[str, Any]]] | None = None

    @property
    def key(self) -> str:
        return f"{self.row} / {self.column}"


# ---- scikit-learn estimators ------------------------------------------------------------------


def _required_params(cls: type) -> list[str]:
    skip = {"self", "args", "kwargs"}
    params = inspect.signature(cls.__init__).parameters.values()
    return [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in skip]


def _base(is_classifier: bool) -> Any:
    from sklearn.linear_model import LogisticRegression, Ridge

    return LogisticRegression() if is_classifier else Ridge()


def _pair(is_classifier: bool) -> list[tuple[str, Any]]:
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    tree = DecisionTreeClassifier if is_classifier else DecisionTreeRegressor
    return [("linear", _base(is_classifier)), ("tree", tree(max_depth=3, random_state=0))]


def _small(estimator: Any) -> Any:
    """Few trees and iterations, a fixed seed: seconds for the whole matrix, the same every run."""
    params = estimator.get_params(deep=False)
    name = type(estimator).__name__
    small = {
        "n_estimators": 5,
        "max_iter": 10 if "HistGradient" in name else None,
        "cv": 3 if name.endswith("CV") else None,
        "Cs": 4,
    }
    small = {k: v for k, v in small.items() if k in params and v is not None}
    if "random_state" in params:
        small["random_state"] = 0
    return estimator.set_params(**small)


def _meta_args(cls: type, is_classifier: bool) -> tuple[dict[str, Any], str]:
    """Constructor arguments for a meta-estimator, and how the row names them."""
    args: dict[str, Any] = dict(SPECIAL_ARGS.get(cls.__name__, {}))
    required = _required_params(cls)
    if cls.__name__ in ESTIMATOR_DEFAULTS_TO_NONE:
        required.append("estimator")
    for name in required:
        if name == "estimator":
            args[name] = _base(is_classifier)
        elif name == "estimators":
            args[name] = _pair(is_classifier)
        else:
            raise NotTried(f"needs constructor argument `{name}`")
    named = [type(e).__name__ for _, e in args.get("estimators", [])]
    named += [type(args["estimator"]).__name__] if "estimator" in args else []
    named += [f"{k}={v!r}" for k, v in SPECIAL_ARGS.get(cls.__name__, {}).items()]
    return args, f"({', '.join(named)})" if named else ""


def _sklearn_factory(cls: type, is_classifier: bool) -> Callable[[], Any]:
    def build() -> Any:
        if cls.__name__ in NOT_TRIED:
            raise NotTried(NOT_TRIED[cls.__name__])
        args, _ = _meta_args(cls, is_classifier)
        return _small(cls(**args))

    return build


def _row_name(cls: type, is_classifier: bool) -> str:
    try:
        return cls.__name__ + _meta_args(cls, is_classifier)[1]
    except NotTried:
        return cls.__name__


def _numeric_columns_transformer(encoder: Any, columns: list[str], scale: bool) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import StandardScaler

    numeric = StandardScaler() if scale else "passthrough"
    return ColumnTransformer([("num", numeric, data.NUMERIC), ("cat", encoder, columns)])


def _allows_nan(estimator: Any) -> bool:
    return bool(estimator.__sklearn_tags__().input_tags.allow_nan)


def for_shape(estimator: Any, shape: str) -> Any:
    """The model a user fits on this input shape around ``estimator`` (data.SHAPE_NOTES)."""
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    if shape == data.STRINGS:
        return make_pipeline(
            _numeric_columns_transformer(OneHotEncoder(handle_unknown="ignore"), ["country"], True), estimator
        )
    if shape == data.INT_CATEGORIES:
        if "categorical_features" in estimator.get_params(deep=False):
            return estimator.set_params(categorical_features=data.CODES)
        onehot = OneHotEncoder(handle_unknown="ignore")
        return make_pipeline(_numeric_columns_transformer(onehot, data.CODES, False), estimator)
    if shape == data.NAN and not _allows_nan(estimator):
        return make_pipeline(SimpleImputer(), estimator)
    return estimator


def _on_shape(build: Callable[[], Any], shape: str) -> Callable[[], Any]:
    return lambda: for_shape(build(), shape)


def _target(name: str, table: str) -> str:
    if table in (OUTLIERS, CLUSTERERS):
        return data.NO_TARGET
    if name in TWO_TARGETS_ONLY:
        return data.TWO_TARGETS
    if name in TWO_LABELS_ONLY:
        return data.TWO_LABELS
    return data.BINARY if table == CLASSIFIERS else data.REGRESSION


def _extra_target(name: str) -> tuple[str, str] | None:
    """The second target an estimator also runs with (row suffix, target), if any."""
    if name in MULTI_OUTPUT_EXTRA:
        return data.TWO_TARGETS, data.TWO_TARGETS
    if name in MULTICLASS_EXTRA:
        return "3 classes", data.MULTICLASS
    return None


def _estimator_cases(table: str, estimators: list[tuple[str, type]]) -> list[Case]:
    is_classifier = table == CLASSIFIERS
    cases = []
    for name, cls in estimators:
        build = _sklearn_factory(cls, is_classifier)
        row, target = _row_name(cls, is_classifier), _target(name, table)
        if target in (data.TWO_TARGETS, data.TWO_LABELS):
            row = f"{row} [{target}]"
        for shape in data.SHAPES if name in REPRESENTATIVE else (data.DATAFRAME,):
            cases.append(Case(table, row, shape, shape, target, "sklearn", _on_shape(build, shape)))
        extra = _extra_target(name)
        if extra is not None:
            suffix, target = extra
            cases.append(
                Case(table, f"{row} [{suffix}]", data.DATAFRAME, data.DATAFRAME, target, "sklearn", build)
            )
    return cases


def sklearn_estimator_cases() -> list[Case]:
    from sklearn.base import OutlierMixin
    from sklearn.utils import all_estimators

    outliers = [(n, c) for n, c in all_estimators() if issubclass(c, OutlierMixin)]
    return (
        _estimator_cases(CLASSIFIERS, all_estimators(type_filter="classifier"))
        + _estimator_cases(REGRESSORS, all_estimators(type_filter="regressor"))
        + _estimator_cases(OUTLIERS, outliers)
    )


def clusterer_cases() -> list[Case]:
    """Every clusterer that assigns new rows to clusters (``predict``; the others label their
    training rows only, and MLflow infers no signature for them), and KMeans after a
    StandardScaler (a Pipeline ending in a clusterer)."""
    from sklearn.utils import all_estimators

    def scaled_kmeans() -> Any:
        from sklearn.cluster import KMeans
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), _small(KMeans()))

    scaled = Case(
        CLUSTERERS,
        "StandardScaler + KMeans",
        data.DATAFRAME,
        data.DATAFRAME,
        data.NO_TARGET,
        "sklearn",
        scaled_kmeans,
    )
    predicting = [(n, c) for n, c in all_estimators(type_filter="cluster") if hasattr(c, "predict")]
    return [*_estimator_cases(CLUSTERERS, predicting), scaled]


# ---- transformers in a Pipeline ---------------------------------------------------------------


def _numeric_transformers() -> dict[str, Callable[[], Any]]:
    from sklearn import decomposition as dec
    from sklearn import feature_selection as fs
    from sklearn import kernel_approximation as ka
    from sklearn import preprocessing as pre

    return {
        "StandardScaler": pre.StandardScaler,
        "MinMaxScaler": pre.MinMaxScaler,
        "MaxAbsScaler": pre.MaxAbsScaler,
        "RobustScaler": pre.RobustScaler,
        "Normalizer": pre.Normalizer,
        "Binarizer": lambda: pre.Binarizer(threshold=1.0),
        "PowerTransformer": pre.PowerTransformer,
        "QuantileTransformer": lambda: pre.QuantileTransformer(n_quantiles=20),
        "PolynomialFeatures": pre.PolynomialFeatures,
        "SplineTransformer": pre.SplineTransformer,
        "KBinsDiscretizer": lambda: pre.KBinsDiscretizer(n_bins=4, quantile_method="averaged_inverted_cdf"),
        "FunctionTransformer(log1p)": lambda: _log1p(),
        "PCA": lambda: dec.PCA(n_components=3),
        "TruncatedSVD": lambda: dec.TruncatedSVD(n_components=3, random_state=0),
        "FastICA": lambda: dec.FastICA(n_components=3, random_state=0),
        "KernelPCA": lambda: dec.KernelPCA(n_components=3),
        "Nystroem": lambda: ka.Nystroem(n_components=20, random_state=0),
        "RBFSampler": lambda: ka.RBFSampler(n_components=20, random_state=0),
        "SelectKBest": lambda: fs.SelectKBest(k=3),
        "VarianceThreshold": fs.VarianceThreshold,
        "FeatureUnion(PCA, SelectKBest)": lambda: _union(),
    }


def _log1p() -> Any:
    import numpy as np
    from sklearn.preprocessing import FunctionTransformer

    return FunctionTransformer(np.log1p)


def _union() -> Any:
    from sklearn.decomposition import PCA
    from sklearn.feature_selection import SelectKBest
    from sklearn.pipeline import make_union

    return make_union(PCA(n_components=2), SelectKBest(k=2))


def _string_encoders() -> dict[str, Callable[[], Any]]:
    from sklearn import preprocessing as pre

    def on_country(encoder: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: _numeric_columns_transformer(encoder(), ["country"], True)

    return {
        "OneHotEncoder": on_country(lambda: pre.OneHotEncoder(handle_unknown="ignore")),
        "OrdinalEncoder": on_country(
            lambda: pre.OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
        ),
        "TargetEncoder": on_country(lambda: pre.TargetEncoder(random_state=0)),
    }


def _imputers() -> dict[str, Callable[[], Any]]:
    from sklearn import impute
    from sklearn.experimental import enable_iterative_imputer  # noqa: F401
    from sklearn.pipeline import make_union

    return {
        "SimpleImputer(mean)": impute.SimpleImputer,
        "SimpleImputer(median)": lambda: impute.SimpleImputer(strategy="median"),
        "SimpleImputer + MissingIndicator": lambda: make_union(
            impute.SimpleImputer(), impute.MissingIndicator()
        ),
        "KNNImputer": impute.KNNImputer,
        "IterativeImputer": lambda: impute.IterativeImputer(random_state=0),
    }


def _pipeline_factory(transformer: Callable[[], Any], final: str) -> Callable[[], Any]:
    from sklearn.pipeline import make_pipeline

    return lambda: make_pipeline(transformer(), _base(final == "LogisticRegression"))


def transformer_cases() -> list[Case]:
    groups = [
        (data.DATAFRAME, _numeric_transformers()),
        (data.STRINGS, _string_encoders()),
        (data.NAN, _imputers()),
    ]
    cases = []
    for shape, transformers in groups:
        for name, make in transformers.items():
            row = name if shape == data.DATAFRAME else f"{name} (on {shape})"
            # One head: a transformer converts the same before a classifier as before a
            # regressor, and the regressors' own heads are in their table (halves the run).
            build = _pipeline_factory(make, "LogisticRegression")
            column = "→ LogisticRegression"
            cases.append(Case(TRANSFORMERS, row, column, shape, data.BINARY, "sklearn", build))
    return cases


# ---- boosters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Booster:
    module: str  # the Python package, and the MLflow flavor
    cls: str
    objective: str
    target: str
    all_shapes: bool = False  # this objective on every input shape, else the DataFrame only


BOOSTER_ROWS = (
    Booster("xgboost", "XGBClassifier", "binary:logistic", data.BINARY, all_shapes=True),
    Booster("xgboost", "XGBClassifier", "multi:softprob", data.MULTICLASS),
    Booster("xgboost", "XGBRegressor", "reg:squarederror", data.REGRESSION, all_shapes=True),
    Booster("xgboost", "XGBRegressor", "count:poisson", data.REGRESSION),
    Booster("lightgbm", "LGBMClassifier", "binary", data.BINARY, all_shapes=True),
    Booster("lightgbm", "LGBMClassifier", "multiclass", data.MULTICLASS),
    Booster("lightgbm", "LGBMRegressor", "regression", data.REGRESSION, all_shapes=True),
    Booster("lightgbm", "LGBMRegressor", "poisson", data.REGRESSION),
    Booster("catboost", "CatBoostClassifier", "Logloss", data.BINARY, all_shapes=True),
    Booster("catboost", "CatBoostClassifier", "MultiClass", data.MULTICLASS),
    Booster("catboost", "CatBoostRegressor", "RMSE", data.REGRESSION, all_shapes=True),
)


def _booster_model(booster: Booster, shape: str) -> Any:
    import importlib

    cls = getattr(importlib.import_module(booster.module), booster.cls)
    if booster.module == "xgboost":
        if shape == data.STRINGS:
            raise NotTried("XGBoost takes strings only as a pandas category dtype")
        return cls(n_estimators=5, max_depth=3, objective=booster.objective, random_state=0)
    if booster.module == "lightgbm":
        if shape == data.STRINGS:
            raise NotTried("LightGBM takes no string columns")
        small_data = {"min_child_samples": 5, "min_data_per_group": 5, "cat_smooth": 1.0}
        return cls(
            n_estimators=5,
            num_leaves=8,
            objective=booster.objective,
            random_state=0,
            verbose=-1,
            **small_data,
        )
    cat_features = {data.STRINGS: ["country"], data.INT_CATEGORIES: data.CODES}.get(shape)
    return cls(
        iterations=5,
        depth=3,
        loss_function=booster.objective,
        random_seed=0,
        verbose=False,
        allow_writing_files=False,
        thread_count=1,
        cat_features=cat_features,
    )


def _fit_params(booster: Booster, shape: str) -> dict[str, Any]:
    if booster.module == "lightgbm" and shape == data.INT_CATEGORIES:
        return {"categorical_feature": data.CODES}
    return {}


def booster_cases() -> list[Case]:
    cases = []
    for booster in BOOSTER_ROWS:
        if importlib.util.find_spec(booster.module) is None:
            continue
        row = f"{booster.cls} ({booster.objective})"
        for shape in data.SHAPES if booster.all_shapes else (data.DATAFRAME,):
            build = _booster_build(booster, shape)
            params = _fit_params(booster, shape)
            cases.append(Case(BOOSTERS, row, shape, shape, booster.target, booster.module, build, params))
    return cases


def _booster_build(booster: Booster, shape: str) -> Callable[[], Any]:
    return lambda: _booster_model(booster, shape)


# ---- ONNX models as logged ----------------------------------------------------------------------


@dataclass(frozen=True)
class OnnxRow:
    row: str
    estimator: str  # a scikit-learn class in sklearn.linear_model, .ensemble or .cluster
    target: str
    zipmap: bool | None = None  # a classifier's option; None: the converter has no ZipMap


# Rows name the model skl2onnx converted ("→ ONNX": a row of its own beside the estimator's).
ONNX_ROWS = (
    OnnxRow(
        "LogisticRegression → ONNX, ZipMap (skl2onnx's default)", "LogisticRegression", data.BINARY, True
    ),
    OnnxRow("LogisticRegression → ONNX, zipmap=False", "LogisticRegression", data.BINARY, False),
    OnnxRow("LogisticRegression [3 classes] → ONNX, ZipMap", "LogisticRegression", data.MULTICLASS, True),
    OnnxRow("RandomForestClassifier → ONNX, ZipMap", "RandomForestClassifier", data.BINARY, True),
    OnnxRow("Ridge → ONNX", "Ridge", data.REGRESSION),
    OnnxRow("KMeans → ONNX", "KMeans", data.NO_TARGET),
)


def _onnx_estimator(name: str) -> Callable[[], Any]:
    def build() -> Any:
        from sklearn import cluster, ensemble, linear_model

        for module in (linear_model, ensemble, cluster):
            if hasattr(module, name):
                return _small(getattr(module, name)())
        raise NotTried(f"no scikit-learn estimator {name}")

    return build


def _skl2onnx_graph(zipmap: bool | None) -> Callable[[Any, Any], tuple[Any, dict[str, Any]]]:
    """What a user logs with mlflow.onnx: skl2onnx's graph of the fitted model, converted from
    one float32 array as its documentation does (a DataFrame's values: skl2onnx gives a
    DataFrame one input per column, which a lone estimator refuses; a ZipMap over float64
    probabilities does not load), with the training rows' example and, since mlflow.onnx infers
    none from an example, the signature ``infer_signature`` gives."""

    def convert(model: Any, X: Any) -> tuple[Any, dict[str, Any]]:
        import numpy as np
        from mlflow.models import infer_signature
        from skl2onnx import to_onnx

        options = {} if zipmap is None else {id(model): {"zipmap": zipmap}}
        graph = to_onnx(model, np.asarray(X[:1], dtype=np.float32), options=options)
        example = data.example(X)
        return graph, {
            "input_example": example,
            "signature": infer_signature(example, model.predict(example)),
        }

    return convert


def onnx_cases() -> list[Case]:
    cases = []
    for spec in ONNX_ROWS:
        for shape in (data.DATAFRAME, data.NUMPY):
            build, convert = _onnx_estimator(spec.estimator), _skl2onnx_graph(spec.zipmap)
            cases.append(Case(ONNX, spec.row, shape, shape, spec.target, "onnx", build, to_log=convert))
    return cases


# ---- Keras models -------------------------------------------------------------------------------


@dataclass
class KerasFit:
    """A Keras model as the matrix fits it: compiled, and fitted for 2 epochs on its inputs as
    ``inputs`` makes them from the shape's features (a user's arrays, not a DataFrame)."""

    model: Any
    inputs: Callable[[Any], Any]

    def fit(self, X: Any, y: Any) -> KerasFit:
        self.model.compile(optimizer="adam", loss="binary_crossentropy")
        self.model.fit(self.inputs(X), y, epochs=2, batch_size=32, verbose=0)
        return self


@dataclass(frozen=True)
class KerasRow:
    row: str
    shape: str
    flavor: str  # "tensorflow" or "keras": the mlflow module it is logged with
    build: Callable[[], KerasFit]


def _numbers(X: Any) -> Any:
    return X  # the numpy shape's float64 array, as it is


def _numerics_and_codes(X: Any) -> dict[str, Any]:
    return {"numeric": X[data.NUMERIC].to_numpy(), "codes": X[data.CODES].to_numpy()}


def _codes(X: Any) -> Any:
    return X[data.CODES].to_numpy()


def _dense() -> KerasFit:
    import keras

    keras.utils.set_random_seed(0)
    layers = [keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1, activation="sigmoid")]
    return KerasFit(keras.Sequential([keras.Input((len(data.NUMERIC),)), *layers]), _numbers)


def _two_inputs() -> KerasFit:
    import keras

    keras.utils.set_random_seed(0)
    numeric = keras.Input((len(data.NUMERIC),), name="numeric")
    codes = keras.Input((len(data.CODES),), dtype="int64", name="codes")
    embedded = keras.layers.Flatten()(keras.layers.Embedding(6, 3)(codes))
    hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([numeric, embedded]))
    out = keras.layers.Dense(1, activation="sigmoid")(hidden)
    return KerasFit(keras.Model({"numeric": numeric, "codes": codes}, out), _numerics_and_codes)


def _embedding() -> KerasFit:
    import keras

    keras.utils.set_random_seed(0)
    ids = keras.Input((len(data.CODES),), dtype="int64")
    head = keras.layers.Dense(1, activation="sigmoid")
    layers = [keras.layers.Embedding(6, 3), keras.layers.Flatten(), head]
    return KerasFit(keras.Sequential([ids, *layers]), _codes)


KERAS_ROWS = (
    KerasRow("Sequential(Dense, Dense) · mlflow.tensorflow", data.NUMPY, "tensorflow", _dense),
    KerasRow("Sequential(Dense, Dense) · mlflow.keras", data.NUMPY, "keras", _dense),
    KerasRow("functional: numerics + Embedding(codes), 2 inputs · mlflow.tensorflow", data.INT_CATEGORIES,
             "tensorflow", _two_inputs),
    KerasRow("Sequential(Embedding, Flatten, Dense) over the codes · mlflow.tensorflow", data.INT_CATEGORIES,
             "tensorflow", _embedding),
)  # fmt: skip


def _keras_logged(flavor: str) -> Callable[[Any, Any], tuple[Any, dict[str, Any]]]:
    """What a user logs: the Keras model, with the training rows' example as its inputs take
    them (mlflow.tensorflow infers the signature from it); mlflow.keras with the signature
    alone, since MLflow 3.17's mlflow.keras.log_model fails writing an input example."""

    def logged(fitted: Any, X: Any) -> tuple[Any, dict[str, Any]]:
        example = fitted.inputs(data.example(X))
        if flavor == "tensorflow":
            return fitted.model, {"input_example": example}
        from mlflow.models import infer_signature

        signature = infer_signature(example, fitted.model.predict(example, verbose=0))
        return fitted.model, {"input_example": None, "signature": signature}

    return logged


def keras_cases() -> list[Case]:
    if importlib.util.find_spec("keras") is None or importlib.util.find_spec("tf2onnx") is None:
        return []
    return [
        Case(KERAS, spec.row, spec.shape, spec.shape, data.BINARY, spec.flavor, spec.build,
             to_log=_keras_logged(spec.flavor))
        for spec in KERAS_ROWS
    ]  # fmt: skip


def all_cases() -> list[Case]:
    return (
        sklearn_estimator_cases()
        + transformer_cases()
        + booster_cases()
        + clusterer_cases()
        + onnx_cases()
        + keras_cases()
    )
