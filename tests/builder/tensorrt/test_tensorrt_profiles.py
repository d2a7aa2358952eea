"""TensorRT plan options and optimization profiles: what a user's flags turn into, and refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.errors import ConversionError, UsageError
from builder.tensorrt.calibration import calibration_set
from builder.tensorrt.options import TOLERANCES, PlanOptions
from builder.tensorrt.profiles import BatchProfile, aligned_preferred_sizes, batch_profile, input_shapes
from builder.tensors import TensorSpec

X = TensorSpec("input", "float32", (-1, 5))


def test_default_opt_is_half_the_max_batch():
    assert batch_profile(64) == BatchProfile(1, 32, 64)
    assert batch_profile(1) == BatchProfile(1, 1, 1)  # max // 2 would be 0: opt is at least 1
    assert batch_profile(3) == BatchProfile(1, 1, 3)


def test_opt_follows_the_largest_preferred_batch_size():
    assert batch_profile(64, preferred_batch_sizes=(8, 16)) == BatchProfile(1, 16, 64)


def test_explicit_opt_wins_and_must_lie_within_the_batches_triton_forms():
    assert batch_profile(64, (8,), opt_batch_size=48) == BatchProfile(1, 48, 64)
    assert batch_profile(64, opt_batch_size=64).opt == 64
    with pytest.raises(UsageError, match=r"--opt-batch-size 65 is outside 1..--max-batch-size \(64\)"):
        batch_profile(64, opt_batch_size=65)
    with pytest.raises(UsageError, match="outside"):
        batch_profile(64, opt_batch_size=0)


def test_no_batching_means_no_profile_and_no_opt():
    assert batch_profile(0) is None
    with pytest.raises(UsageError, match="--opt-batch-size needs batching"):
        batch_profile(0, opt_batch_size=4)


def test_profile_invariant():
    with pytest.raises(UsageError, match="need 1 <= min <= opt <= max"):
        BatchProfile(1, 8, 4)


def test_batcher_prefers_the_profiles_opt_and_max():
    profile = BatchProfile(1, 32, 64)
    assert aligned_preferred_sizes(profile, ()) == (32, 64)
    assert aligned_preferred_sizes(profile, (8, 32)) == (8, 32, 64)
    assert aligned_preferred_sizes(None, ()) == ()


def test_input_shapes_vary_the_batch_axis_only():
    (shapes,) = input_shapes(BatchProfile(1, 16, 64), [X])
    assert (shapes.min, shapes.opt, shapes.max) == ((1, 5), (16, 5), (64, 5))


def test_fixed_shapes_without_batching():
    fixed = TensorSpec("image", "float32", (1, 3, 8, 8))
    (shapes,) = input_shapes(None, [fixed])
    assert shapes.min == shapes.opt == shapes.max == (1, 3, 8, 8)


def test_variable_batch_without_batching_is_refused():
    with pytest.raises(UsageError, match="needs fixed shapes") as info:
        input_shapes(None, [X])
    assert "--max-batch-size N" in (info.value.hint or "")


def test_variable_non_batch_dimension_is_refused_not_guessed():
    seq = TensorSpec("tokens", "int64", (-1, -1))
    with pytest.raises(ConversionError, match="besides the batch axis"):
        input_shapes(BatchProfile(1, 2, 4), [seq])


def test_unbatched_input_with_batching_is_refused():
    with pytest.raises(UsageError, match="no variable batch axis"):
        input_shapes(BatchProfile(1, 2, 4), [TensorSpec("input", "float32", (2, 5))])


def test_plan_options_defaults_and_tolerances():
    options = PlanOptions()
    assert options.precision == "fp16" and options.tolerance == (1e-2, 1e-2)
    assert PlanOptions(precision="fp32").tolerance == (1e-4, 1e-4)
    assert PlanOptions(precision="tf32", atol=0.5).tolerance == (0.5, 1e-3)
    # Tighter for wider precisions: the order is what docs/gpu.md documents.
    assert TOLERANCES["fp32"] < TOLERANCES["tf32"] < TOLERANCES["fp16"] < TOLERANCES["int8"]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"precision": "bf16"}, "use one of fp32, tf32, fp16, int8"),
        ({"precision": "FP16"}, "use one of"),
        ({"workspace_mb": 0}, "--workspace-mb"),
        ({"opt_batch_size": 0}, "--opt-batch-size"),
        ({"int8_calibration": Path("rows.npy")}, "only used with --plan-precision int8"),
        ({"atol": -1.0}, "--plan-atol"),
    ],
)
def test_plan_options_refuse_bad_flags(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment):
        PlanOptions(**kwargs)


def test_calibration_file_is_checked_before_any_work(tmp_path: Path):
    with pytest.raises(UsageError, match="no such file"):
        PlanOptions(precision="int8", int8_calibration=tmp_path / "missing.npy").check_files()
    (tmp_path / "rows.csv").write_text("1,2\n")
    with pytest.raises(UsageError, match=r"expected a \.npy"):
        PlanOptions(precision="int8", int8_calibration=tmp_path / "rows.csv").check_files()


def test_int8_without_calibration_rows_is_refused():
    with pytest.raises(UsageError, match="int8 needs rows to calibrate on") as info:
        calibration_set([X], None, None)
    assert "--int8-calibration" in (info.value.hint or "")


def test_int8_calibrates_on_the_input_example(tmp_path: Path):
    example = {"input": np.ones((5, 5), np.float64)}
    cal = calibration_set([X], None, example)
    assert cal.source == "input_example" and cal.rows == 5
    assert cal.arrays["input"].dtype == np.float32  # cast to the served dtype
    assert cal.to_dict()["sha256"] == calibration_set([X], None, example).sha256()


def test_int8_calibration_files(tmp_path: Path):
    np.save(tmp_path / "rows.npy", np.zeros((100, 5), np.float32))
    cal = calibration_set([X], tmp_path / "rows.npy", {"input": np.ones((2, 5), np.float32)})
    assert cal.rows == 100 and cal.source.endswith("rows.npy")  # the file wins over the example
    np.savez(tmp_path / "rows.npz", input=np.zeros((7, 5), np.float32))
    assert calibration_set([X], tmp_path / "rows.npz", None).rows == 7
    np.save(tmp_path / "narrow.npy", np.zeros((10, 4), np.float32))
    with pytest.raises(UsageError, match=r"have shape \[10, 4\], the input takes \[-1, 5\]"):
        calibration_set([X], tmp_path / "narrow.npy", None)
    two = [X, TensorSpec("mask", "float32", (-1, 5))]
    with pytest.raises(UsageError, match=r"a \.npy holds one array"):
        calibration_set(two, tmp_path / "rows.npy", None)
    with pytest.raises(UsageError, match="no array for input 'mask'"):
        calibration_set(two, tmp_path / "rows.npz", None)
