"""The support matrix: which scikit-learn estimators, Pipelines, booster, ONNX and Keras models
``builder export`` converts, on which input shapes, generated into docs/support-matrix.md.

Every case (cases.py) is fitted on small generated data (data.py), logged into one MLflow run of
a fresh SQLite registry and exported through its ``runs:/`` URI (run.py); the outcomes are
rendered as markdown (render.py), and the test fails when the committed docs/support-matrix.md
says otherwise. Regenerate it with ``SUPPORT_MATRIX_WRITE=1 .venv/bin/python -m pytest
tests/builder/support_matrix`` and review the diff: a model that stops exporting is a regression, one
that starts exporting is a fix to record.

Which shapes each model runs on: every scikit-learn estimator on the numeric DataFrame, the
shape every user has; the other shapes (numpy array, string columns, integer-coded categories,
NaN) on a representative set, a few of each family (linear, trees, bagged and boosted trees,
SVM, neighbours, naive Bayes, neural network), because the rest of a family shares its
converter and its input handling and would repeat its row; the binary classifier and first
regressor of each booster library on every shape, their other objectives on the DataFrame.
Triton is not started here: this matrix is about conversion and parity.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import mlflow
import pytest

from tests.builder.support_matrix import cases as matrix_cases
from tests.builder.support_matrix.render import REGENERATE, render
from tests.builder.support_matrix.run import EXPORTED, Outcome, run_case

pytestmark = pytest.mark.support_matrix

DOC = Path(__file__).resolve().parents[3] / "docs" / "support-matrix.md"
WRITE = os.environ.get("SUPPORT_MATRIX_WRITE") == "1"
DIFF_LINES = 60


@pytest.fixture(scope="module")
def matrix(matrix_registry: tuple[str, Path]) -> tuple[list[matrix_cases.Case], list[Outcome]]:
    """Every case, run once for the module, in one MLflow run."""
    experiment_id, root = matrix_registry
    cases = matrix_cases.all_cases()
    with mlflow.start_run(experiment_id=experiment_id) as run:
        outcomes = [
            run_case(case, run.info.run_id, f"sm_{i:03d}", root / "repo") for i, case in enumerate(cases)
        ]
    return cases, outcomes


def test_cases_are_unique() -> None:
    keys = [case.key for case in matrix_cases.all_cases()]
    assert len(keys) == len(set(keys))


def test_the_common_models_export(matrix: tuple[list[matrix_cases.Case], list[Outcome]]) -> None:
    """A broken environment would refuse everything, and a regenerated file would record it."""
    outcomes = {case.key: outcome for case, outcome in zip(*matrix, strict=True)}
    for key in ("LogisticRegression / DataFrame", "Ridge / numpy", "StandardScaler / → LogisticRegression"):
        assert outcomes[key].status == EXPORTED, (key, outcomes[key])


def test_every_refusal_names_the_model_and_gives_a_hint(
    matrix: tuple[list[matrix_cases.Case], list[Outcome]],
) -> None:
    breaches = {
        case.key: (outcome.detail, *outcome.contract)
        for case, outcome in zip(*matrix, strict=True)
        if outcome.contract
    }
    assert breaches == {}


def test_docs_match_the_run(matrix: tuple[list[matrix_cases.Case], list[Outcome]]) -> None:
    generated = render(*matrix)
    if WRITE:
        DOC.write_text(generated)
        return
    committed = DOC.read_text() if DOC.exists() else ""
    if committed != generated:
        diff = difflib.unified_diff(
            committed.splitlines(), generated.splitlines(), "docs/support-matrix.md", "this run", lineterm=""
        )
        shown = "\n".join(list(diff)[:DIFF_LINES])
        pytest.fail(f"docs/support-matrix.md differs from this run; regenerate: {REGENERATE}\n{shown}")
