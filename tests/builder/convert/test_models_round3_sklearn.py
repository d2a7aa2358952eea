"""The third held-out round's scikit-learn models (issue 29, items 3, 4, 5 and 7), as a user
registers them: fitted on a DataFrame, logged with ``mlflow.sklearn.log_model`` and an input
example into the tests' SQLite registry, exported with ``builder export models:/NAME@champion``.

- (3) bool columns into a OneHotEncoder: served with a ``TYPE_BOOL`` input per bool column, as the
  signature says (the graph casts it to the int64 skl2onnx builds for);
- (4) encoders with ``handle_unknown="error"`` (OrdinalEncoder, and OneHotEncoder's default): parity
  rows keep to the categories the model learned, and the export says so;
- (5) a soft VotingClassifier, bare and at the end of a Pipeline (``flatten_transform=True``, the
  default, which skl2onnx refuses, shapes ``transform()`` only);
- a OneHotEncoder with ``handle_unknown="infrequent_if_exist"`` that learned no infrequent
  category, which now converts (unseen categories encode as zeros, as natively).

Each is served by one Triton for the module and answers over HTTP as the native model does on
fresh rows (for the encoders that accept them, with categories never seen in training). Then (7):
models skl2onnx does not reproduce are refused with a hint naming the parameter to change, and
the same model with that change exports with parity.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.errors import BuilderError, ConversionError, ParityError
from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import servers
from support.models import register_fitted
from tests.builder.convert.helpers import infer, request_tensors, served_facts

pytestmark = pytest.mark.integration

COUNTRIES = ["FR", "DE", "US", "GB", "IT"]
CHANNELS = ["web", "app", "pos"]


def frame(rows: int, seed: int, countries: list[str] = COUNTRIES) -> tuple[pd.DataFrame, np.ndarray]:
    """Transactions with float, bool and string columns; amounts are float32 values, so the
    native model sees exactly what Triton is sent."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "amount": rng.lognormal(3.0, 1.0, rows).astype(np.float32).astype(np.float64),
            "is_new": rng.random(rows) < 0.3,
            "is_weekend": rng.random(rows) < 0.4,
            "country": rng.choice(countries, rows),
            "channel": rng.choice(CHANNELS, rows, p=[0.5, 0.35, 0.15]),
        }
    )
    score = 0.03 * X.amount + 1.5 * X.is_new - 0.8 * X.is_weekend + 0.7 * X.country.isin(["US", "GB"])
    y = (score + rng.normal(0, 0.5, rows) > score.median()).astype(int).to_numpy()
    return X, y


def _ct(*parts: tuple[str, Any, list[str]]) -> Any:
    from sklearn.compose import ColumnTransformer

    return ColumnTransformer(list(parts))


def bool_onehot() -> tuple[Any, list[str]]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    pre = _ct(
        ("num", StandardScaler(), ["amount"]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["country", "is_new"]),  # bool beside a string
        ("flag", OneHotEncoder(drop="if_binary"), ["is_weekend"]),  # a bool alone
    )
    return make_pipeline(pre, LogisticRegression()), ["amount", "is_new", "is_weekend", "country"]


def ordinal_error() -> tuple[Any, list[str]]:
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OrdinalEncoder

    pre = _ct(("num", "passthrough", ["amount"]), ("cat", OrdinalEncoder(), ["country", "channel"]))
    model = make_pipeline(pre, RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0))
    return model, ["amount", "country", "channel"]


def onehot_error() -> tuple[Any, list[str]]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    pre = _ct(("num", StandardScaler(), ["amount"]), ("cat", OneHotEncoder(), ["country"]))
    return make_pipeline(pre, LogisticRegression()), ["amount", "country"]


def soft_voting() -> tuple[Any, list[str]]:
    from sklearn.ensemble import VotingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import GaussianNB
    from sklearn.tree import DecisionTreeClassifier

    members = [
        ("lr", LogisticRegression()),
        ("tree", DecisionTreeClassifier(max_depth=4, random_state=0)),
        ("nb", GaussianNB()),
    ]
    return VotingClassifier(members, voting="soft", weights=[2, 1, 1]), ["amount"]


def soft_voting_pipeline() -> tuple[Any, list[str]]:
    from sklearn.ensemble import RandomForestClassifier, VotingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    pre = _ct(
        ("num", StandardScaler(), ["amount"]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["country", "channel"]),
    )
    members = [("lr", LogisticRegression()), ("rf", RandomForestClassifier(n_estimators=10, random_state=0))]
    return make_pipeline(pre, VotingClassifier(members, voting="soft")), ["amount", "country", "channel"]


def onehot_infrequent_if_exist() -> tuple[Any, list[str]]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    # min_frequency below every category's share: none is infrequent, so an unseen category
    # encodes as zeros.
    encoder = OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=0.02)
    pre = _ct(("num", StandardScaler(), ["amount"]), ("cat", encoder, ["country"]))
    return make_pipeline(pre, LogisticRegression()), ["amount", "country"]


SERVED: dict[str, Callable[[], tuple[Any, list[str]]]] = {
    "r3-bool-onehot": bool_onehot,
    "r3-ordinal-error": ordinal_error,
    "r3-onehot-error": onehot_error,
    "r3-soft-voting": soft_voting,
    "r3-soft-voting-pipeline": soft_voting_pipeline,
    "r3-onehot-infrequent-if-exist": onehot_infrequent_if_exist,
}
# Refuses categories it never saw: its fresh rows keep to the training categories.
REFUSES_UNSEEN = {"r3-ordinal-error", "r3-onehot-error"}
VIA_CLI = "r3-ordinal-error"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "builder", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def exported(mlflow_registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every SERVED model fitted, registered and exported into one repository: name -> the
    native model, its columns and the export's step lines."""
    repo = tmp_path_factory.mktemp("round3") / "model_repo"
    X, y = frame(300, seed=0)
    out: dict[str, Any] = {"repo": repo, "models": {}, "steps": {}}
    for name, build in SERVED.items():
        model, columns = build()
        model.fit(X[columns], y)
        register_fitted(name, model, X[columns], example_rows=8)
        if name == VIA_CLI:
            done = cli("export", f"models:/{name}@champion", "--repo", str(repo), "--json")
            assert done.returncode == 0, done.stderr
            out["steps"][name] = {s["step"]: s["detail"] for s in json.loads(done.stdout)["steps"]}
        else:
            result = export_model(ExportRequest(f"models:/{name}@champion", repo))
            assert result.parity.passed
            out["steps"][name] = {s.name: s.detail for s in result.steps}
        out["models"][name] = (model, columns)
    return out


@pytest.fixture(scope="module")
def triton(
    exported: dict[str, Any], triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("round3-log") / "tritonserver.log"
    with servers.serving(exported["repo"], triton_runtime, log, timeout=240) as server:
        yield server


def fresh_rows(name: str, columns: list[str]) -> pd.DataFrame:
    """New rows; for a model that accepts them, with a category never seen in training."""
    countries = COUNTRIES if name in REFUSES_UNSEEN else [*COUNTRIES, "NL"]
    X, _ = frame(40, seed=7, countries=countries)
    if name not in REFUSES_UNSEEN:
        X.loc[:3, "country"] = "NL"
    return X[columns]


@pytest.mark.parametrize("name", list(SERVED))
def test_triton_answers_like_the_native_model(triton: TritonServer, exported: dict[str, Any], name: str):
    model, columns = exported["models"][name]
    fresh = fresh_rows(name, columns)
    facts = served_facts(triton, name)
    got = infer(triton, "http", name, request_tensors(facts, fresh), ["label", "probabilities"])
    np.testing.assert_array_equal(got["label"], np.asarray(model.predict(fresh)).reshape(-1, 1))
    np.testing.assert_allclose(got["probabilities"], model.predict_proba(fresh), atol=1e-5, rtol=1e-5)


def test_bool_columns_are_served_as_bool_inputs(triton: TritonServer):
    facts = served_facts(triton, "r3-bool-onehot")
    assert facts["layout"] == "columns"
    assert facts["inputs"] == [
        ("amount", "TYPE_FP32"),
        ("is_new", "TYPE_BOOL"),
        ("is_weekend", "TYPE_BOOL"),
        ("country", "TYPE_STRING"),
    ]


def test_encoders_refusing_unknown_categories_get_only_learned_ones(exported: dict[str, Any]):
    steps = exported["steps"]
    assert steps["r3-ordinal-error"]["build parity rows"].endswith(
        "; no unseen values for country, channel: OrdinalEncoder(handle_unknown='error') refuses them"
    )
    onehot = steps["r3-onehot-error"]["build parity rows"]
    assert "no unseen values for country: OneHotEncoder(handle_unknown='error')" in onehot
    # An encoder that takes unseen categories is still checked on them.
    assert "no unseen values" not in steps["r3-bool-onehot"]["build parity rows"]
    meta = json.loads((exported["repo"] / "r3-ordinal-error" / "1" / "metadata.json").read_text())
    assert meta["parity"]["passed"] and meta["parity"]["rows"] == 8 + 64


def _imputer(fixed: bool) -> Any:
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(SimpleImputer(add_indicator=not fixed), LogisticRegression())


def _tfidf(fixed: bool) -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(TfidfVectorizer(sublinear_tf=not fixed), LogisticRegression())


def _isotonic(fixed: bool) -> Any:
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.linear_model import LogisticRegression

    return CalibratedClassifierCV(LogisticRegression(), method="sigmoid" if fixed else "isotonic", cv=3)


def _max_categories(fixed: bool) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    encoder = OneHotEncoder(handle_unknown="ignore", **({} if fixed else {"max_categories": 3}))
    return make_pipeline(
        _ct(("num", StandardScaler(), ["amount"]), ("cat", encoder, ["country"])), LogisticRegression()
    )


def _infrequent_unseen(fixed: bool) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    encoder = OneHotEncoder(handle_unknown="ignore" if fixed else "infrequent_if_exist", min_frequency=0.2)
    pre = _ct(("num", StandardScaler(), ["amount"]), ("cat", encoder, ["country", "channel"]))
    return make_pipeline(pre, LogisticRegression())


def _hard_voting(fixed: bool) -> Any:
    from sklearn.ensemble import VotingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.tree import DecisionTreeClassifier

    members = [("lr", LogisticRegression()), ("tree", DecisionTreeClassifier(max_depth=3, random_state=0))]
    return VotingClassifier(members, flatten_transform=not fixed)


def _nan_frame(X: pd.DataFrame) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    out = X[["amount"]].assign(risk=rng.uniform(0, 1, len(X)))
    out.loc[rng.random(len(X)) < 0.2, "risk"] = np.nan
    return out


TEXTS = ["good fast service", "slow bad service", "very good", "bad bad bad", "fast fast good service ok"]

# name -> (model with or without the hint's fix, its input frame, the refusal, what the hint says)
HINTED: dict[str, tuple[Callable[[bool], Any], Callable[[pd.DataFrame], Any], type[BuilderError], str]] = {
    "r3-hint-imputer-indicator": (_imputer, _nan_frame, ParityError, "add_indicator=False"),
    "r3-hint-tfidf-sublinear": (
        _tfidf,
        lambda X: pd.DataFrame({"text": np.resize(TEXTS, len(X))}),
        ParityError,
        "sublinear_tf=False",
    ),
    "r3-hint-isotonic": (_isotonic, lambda X: X[["amount"]], ParityError, "method='sigmoid'"),
    "r3-hint-onehot-max-categories": (
        _max_categories,
        lambda X: X[["amount", "country"]],
        ConversionError,
        "without min_frequency and max_categories",
    ),
    "r3-hint-onehot-infrequent-unseen": (
        _infrequent_unseen,
        lambda X: X[["amount", "country", "channel"]],
        ConversionError,
        "handle_unknown='ignore'",
    ),
    "r3-hint-hard-voting": (
        _hard_voting,
        lambda X: X[["amount"]],
        ConversionError,
        "flatten_transform=False",
    ),
}


@pytest.mark.parametrize("name", list(HINTED))
def test_a_known_converter_gap_is_refused_with_what_to_change(
    mlflow_registry: str, tmp_path: Path, name: str
):
    build, inputs, refusal, change = HINTED[name]
    X, y = frame(200, seed=1)
    x = inputs(X)
    data = x.get("text", x)  # a text Pipeline is fitted on the documents
    repo = tmp_path / "repo"
    register_fitted(name, build(False).fit(data, y), x, example_rows=8)
    with pytest.raises(refusal) as refused:
        export_model(ExportRequest(f"models:/{name}@champion", repo))
    assert refused.value.hint is not None and change in refused.value.hint, refused.value.hint
    assert not repo.exists(), "a refused export writes nothing"
    # The hint is right: the same model with that change exports, parity passed.
    register_fitted(name, build(True).fit(data, y), x, example_rows=8)
    assert export_model(ExportRequest(f"models:/{name}@champion", repo)).parity.passed
