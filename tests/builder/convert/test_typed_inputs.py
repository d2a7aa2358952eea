"""Layouts from MLflow signatures, parity rows for strings, string warm-up files, string parity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from mlflow.models import infer_signature
from mlflow.models.signature import ModelSignature
from mlflow.types.schema import Schema, TensorSpec

from builder.errors import ConversionError
from builder.export.describe import warmup_bytes
from builder.parity.compare import compare
from builder.parity.rows import UNSEEN, build_feeds, example_tensors
from builder.registry.signature import inputs_from_signature
from builder.tensors import TensorSpec as Spec

FRAME = pd.DataFrame(
    {
        "amount": [1.5, 2.0],
        "country": ["us", "de"],
        "n_items": np.array([1, 3], dtype=np.int64),
        "vip": [True, False],
    }
)


def test_numeric_columns_stay_one_float_matrix():
    inputs = inputs_from_signature(infer_signature(FRAME[["amount", "n_items", "vip"]]), model_ref="m")
    assert inputs.layout == "matrix"
    assert [(t.name, t.dtype, t.shape) for t in inputs.tensors] == [("input", "float32", (-1, 3))]
    assert inputs.feature_names == ("amount", "n_items", "vip")


def test_a_string_column_makes_one_typed_input_per_column_in_signature_order():
    inputs = inputs_from_signature(infer_signature(FRAME), model_ref="m")
    assert inputs.layout == "columns"
    assert [(t.name, t.dtype, t.shape) for t in inputs.tensors] == [
        ("amount", "float32", (-1, 1)),
        ("country", "string", (-1, 1)),
        ("n_items", "int64", (-1, 1)),
        ("vip", "bool", (-1, 1)),
    ]


def test_a_numpy_signature_is_the_tensor_as_declared():
    signature = ModelSignature(inputs=Schema([TensorSpec(np.dtype(np.float64), (-1, 6))]))
    inputs = inputs_from_signature(signature, model_ref="m")
    assert inputs.layout == "tensors" and inputs.feature_names is None
    assert [(t.name, t.dtype, t.shape) for t in inputs.tensors] == [("input", "float64", (-1, 6))]


def test_datetime_and_binary_columns_are_refused_with_what_to_do():
    frame = pd.DataFrame({"at": pd.date_range("2026-01-01", periods=2), "x": [1.0, 2.0]})
    with pytest.raises(ConversionError) as refused:
        inputs_from_signature(infer_signature(frame), model_ref="m version 3")
    assert "'at'" in refused.value.message and "datetime" in refused.value.message
    assert refused.value.hint and "epoch seconds" in refused.value.hint
    with pytest.raises(ConversionError) as binary:
        inputs_from_signature(infer_signature(pd.DataFrame({"blob": [b"\x00", b"\x01"]})), model_ref="m")
    assert "binary" in binary.value.message


def test_string_parity_rows_come_from_the_example_and_what_the_model_learned():
    inputs = inputs_from_signature(infer_signature(FRAME), model_ref="m")
    example = example_tensors(FRAME, inputs)
    assert example is not None and example["country"].dtype == object
    feeds = build_feeds(inputs, example, {"country": ("us", "de", "fr", "jp")}, generated=40)
    countries = set(feeds.arrays["country"].ravel())
    assert countries <= {"us", "de", "fr", "jp", "", UNSEEN}
    assert {"", UNSEEN} <= countries  # the unknown path is always exercised
    assert len(countries & {"fr", "jp"}) >= 1  # learned categories beyond the example
    assert feeds.source == "input_example+generated" and feeds.rows == 42
    assert feeds.arrays["n_items"].dtype == np.int64 and feeds.arrays["vip"].dtype == bool


def test_missing_strings_in_an_example_are_sent_as_the_empty_string():
    frame = FRAME.assign(country=["us", None])
    inputs = inputs_from_signature(infer_signature(FRAME), model_ref="m")
    example = example_tensors(frame, inputs)
    assert example is not None and example["country"].ravel().tolist() == ["us", ""]


def test_nan_is_tested_only_where_the_example_has_it():
    frame = pd.DataFrame({"a": [1.0, np.nan], "b": [2.0, 3.0]})
    inputs = inputs_from_signature(infer_signature(frame), model_ref="m")
    with_nan = build_feeds(inputs, example_tensors(frame, inputs), {}, generated=200)
    assert np.isnan(with_nan.arrays["input"][2:]).any()
    clean = frame.fillna(0.0)
    without = build_feeds(inputs, example_tensors(clean, inputs), {}, generated=200)
    assert not np.isnan(without.arrays["input"]).any()


def test_string_warmup_file_is_tritons_bytes_serialization():
    from tritonclient.utils import deserialize_bytes_tensor

    raw = warmup_bytes(Spec("country", "string", (-1, 1)), np.array([["Zürich"]], dtype=object))
    assert deserialize_bytes_tensor(raw).tolist() == ["Zürich".encode()]
    assert (
        warmup_bytes(Spec("x", "float32", (-1, 2)), np.array([[1.0, 2.0]], np.float32))
        == np.array([1.0, 2.0], np.float32).tobytes()
    )


def test_string_labels_must_be_equal():
    native = {"label": np.array([["high"], ["low"]])}
    same = compare({"label": np.array([["high"], ["low"]], dtype=object)}, native, rows=2, source="x")
    assert same.passed
    differs = compare({"label": np.array([["high"], ["mid"]], dtype=object)}, native, rows=2, source="x")
    assert not differs.passed and differs.outputs[0].mismatches == 1


def test_a_string_imputer_with_a_nan_marker_is_refused_with_the_form_that_converts():
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    from builder.convert.sklearn import SklearnConverter

    frame = pd.DataFrame({"c": ["a", "b", None, "a"] * 5, "x": np.arange(20.0)})
    strings = make_pipeline(SimpleImputer(strategy="most_frequent"), OneHotEncoder())
    model = make_pipeline(
        ColumnTransformer([("c", strings, ["c"]), ("x", "passthrough", ["x"])]), LogisticRegression()
    ).fit(frame, [0, 1] * 10)
    inputs = inputs_from_signature(infer_signature(frame), model_ref="m")
    with pytest.raises(ConversionError) as refused:
        SklearnConverter().to_onnx(model, inputs, 17)
    assert "ColumnTransformer -> LogisticRegression" in refused.value.message
    assert refused.value.hint and "missing_values=''" in refused.value.hint
