"""The parity rows' one rule (builder/parity/rows.py): generated rows look like the training data
(learned categories, the example's integers and range, non-negative columns stay so, NaN where
the example has it), and a parity miss says whether it is a tolerance question (compare.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from builder.errors import ParityError
from builder.parity.compare import OutputParity, ParityReport, gross_miss, require_pass
from builder.parity.rows import build_feeds, example_tensors
from builder.registry.signature import Column, ModelInputs
from builder.tensors import TensorSpec


def _matrix(names: list[str]) -> ModelInputs:
    return ModelInputs(
        layout="matrix",
        tensors=(TensorSpec("input", "float32", (-1, len(names))),),
        columns=tuple(Column(n, "float32") for n in names),
    )


EXAMPLE = pd.DataFrame(
    {
        "amount": [2.5, 7.25, 3.1, 12.0],  # non-negative floats
        "hour": [3.0, 7.0, 22.0, 15.0],  # integer-valued floats
        "delta": [-1.5, 0.5, 2.25, -0.75],  # floats of both signs
        "code": [1, 4, 2, 1],  # an integer category code
        "risk": [0.1, np.nan, 0.4, 0.3],  # NaN in the example
    }
)


def _generated(vocabulary: dict | None = None) -> pd.DataFrame:
    inputs = _matrix(list(EXAMPLE.columns))
    example = example_tensors(EXAMPLE, inputs)
    feeds = build_feeds(inputs, example, vocabulary or {}, 400)
    return pd.DataFrame(feeds.arrays["input"][len(EXAMPLE) :], columns=list(EXAMPLE.columns))


def test_integer_valued_columns_get_integers_within_the_example_range():
    rows = _generated()
    for name in ("hour", "code"):
        values = rows[name].to_numpy()
        assert np.all(values == np.round(values)), name
        assert values.min() >= EXAMPLE[name].min() and values.max() <= EXAMPLE[name].max(), name
    assert set(rows.code) > {1.0}  # more than one code is drawn


def test_float_columns_stay_within_the_example_range_and_sign():
    rows = _generated()
    assert rows.amount.min() >= 2.5 and rows.amount.max() <= 12.0
    assert (rows.amount != rows.amount.round()).any()  # still fractional
    assert rows.delta.min() < 0 < rows.delta.max()
    assert rows.delta.min() >= -1.5 and rows.delta.max() <= 2.25


def test_nan_only_where_the_example_has_it():
    rows = _generated()
    assert rows.risk.isna().any()
    assert not rows.drop(columns="risk").isna().any().any()


def test_learned_categories_are_drawn_for_matrix_columns_by_name():
    rows = _generated({"code": (0, 3, 5)})
    assert set(rows.code) == {0.0, 3.0, 5.0}


def test_columns_layout_int_column_uses_learned_codes_and_example_range():
    inputs = ModelInputs(
        layout="columns",
        tensors=(TensorSpec("country", "string", (-1, 1)), TensorSpec("n", "int64", (-1, 1))),
        columns=(Column("country", "string"), Column("n", "int64")),
    )
    example = example_tensors(pd.DataFrame({"country": ["us", "de"], "n": [2, 5]}), inputs)
    feeds = build_feeds(inputs, example, {}, 200)
    n = feeds.arrays["n"][2:]
    assert n.dtype == np.int64 and n.min() >= 2 and n.max() <= 5
    feeds = build_feeds(inputs, example, {"n": (7, 9)}, 200)
    assert set(feeds.arrays["n"][2:].ravel()) == {7, 9}


def test_single_row_float_example_spreads_without_going_negative():
    inputs = _matrix(["x"])
    feeds = build_feeds(inputs, {"input": np.array([[0.4]], dtype=np.float32)}, {}, 200)
    x = feeds.arrays["input"][1:]
    assert x.min() >= 0 and x.max() > 0.4 and len(np.unique(x)) > 10


def test_without_an_example_rows_are_still_generated():
    feeds = build_feeds(_matrix(["a", "b"]), None, {}, 0)
    assert feeds.rows == 8 and feeds.source == "generated"
    assert np.isfinite(feeds.arrays["input"]).all()


def test_lightgbm_vocabulary_names_the_categorical_columns():
    import lightgbm as lgb

    from builder.convert.boosting import LightGBMConverter

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=120), "code": rng.integers(0, 6, 120)})
    y = X.code.isin([1, 4]).astype(int)
    model = lgb.LGBMClassifier(n_estimators=3, verbose=-1, min_child_samples=5, min_data_per_group=5)
    model.fit(X, y, categorical_feature=["code"])
    learned = LightGBMConverter().vocabulary(model, _matrix(["a", "code"]))
    assert learned == {"code": (0, 1, 2, 3, 4, 5)}


# --- require_pass: a near miss suggests the tolerance, a wide one says "a different model" ---


def _report(*outputs: OutputParity, atol: float = 1e-5, rtol: float = 1e-5) -> ParityReport:
    return ParityReport(rows=48, source="generated", atol=atol, rtol=rtol, outputs=outputs)


def _refusal(report: ParityReport) -> ParityError:
    with pytest.raises(ParityError) as caught:
        require_pass(report, "m version 1")
    return caught.value


def test_near_miss_suggests_the_tolerance():
    near = OutputParity("probabilities", 3e-5, 4e-5, mismatches=2, elements=96)
    error = _refusal(_report(near))
    assert "ONNX output differs from the original" in error.message
    assert "--atol" in (error.hint or "")


def test_a_wide_miss_says_different_model_and_not_the_tolerance():
    wide = OutputParity("probabilities", 0.42, 0.9, mismatches=6, elements=96)
    error = _refusal(_report(wide))
    assert error.message.startswith("m version 1: the converted graph computes a different model")
    assert "6/96 outside tolerance" in error.message
    assert "--atol" not in (error.hint or "") and "--rtol" not in (error.hint or "")


def test_labels_differing_on_many_rows_are_a_different_model():
    labels = OutputParity("label", 1.0, 1.0, mismatches=10, elements=48)
    assert gross_miss(labels, 1e-5, 1e-5, exact=True)
    assert "different model" in _refusal(_report(labels)).message


def test_a_few_tied_labels_do_not_suggest_the_tolerance_either():
    labels = OutputParity("label", 1.0, 1.0, mismatches=1, elements=48)
    error = _refusal(_report(labels))
    assert "differs from the original" in error.message
    assert "do not apply" in (error.hint or "")


def test_zero_tolerance_does_not_turn_rounding_into_a_different_model():
    rounding = OutputParity("probabilities", 6e-8, 2e-7, mismatches=90, elements=96)
    error = _refusal(_report(rounding, atol=0, rtol=0))
    assert "differs from the original" in error.message and "--atol" in (error.hint or "")


def test_the_gross_rule_boundaries():
    assert not gross_miss(OutputParity("p", 9e-4, 1.0, 1, 10), 1e-5, 1e-5)  # < 100 x atol
    assert not gross_miss(OutputParity("p", 1.0, 9e-4, 1, 10), 1e-5, 1e-5)  # < 100 x rtol
    assert gross_miss(OutputParity("p", 1.1e-3, 1.1e-3, 1, 10), 1e-5, 1e-5)
    assert not gross_miss(OutputParity("label", 1.0, 1.0, 4, 40), 1e-5, 1e-5, exact=True)  # 10 %
    assert gross_miss(OutputParity("label", 1.0, 1.0, 5, 40), 1e-5, 1e-5, exact=True)
