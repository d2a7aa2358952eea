"""The serving contract module (serving_contract/): every fact of every model kind survives the
trip through the Triton config's parameters and through metadata.json, the written text is what
docs/serving-contract.md shows (the keys are spelled out here on purpose: they are the wire
format clients outside this repository read), a malformed contract is read with an error that
names the key, and the module needs nothing but the standard library."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

import pytest

from serving_contract import Column, ContractError, Explainer, OutlierScore, ServingContract, keys

ROOT = Path(__file__).resolve().parents[2]
FEAST = {
    "feast.feature_service": "fraud_v1",
    "feast.entity_keys": "user_id,merchant_id",
    "feast.request_fields": '["amount", "channel"]',
    "feast.features": '["txn:amount_7d"]',
}
TYPED = (
    Column("amount", "float32"),
    Column("channel", "string"),
    Column("visits", "int64"),
    Column("vip", "bool"),
)
MATRIX = (Column("amount", "float32"), Column("risk", "float32"))

CONTRACTS = {
    "binary": ServingContract(
        layout="columns",
        columns=TYPED,
        feature_names=tuple(c.name for c in TYPED),
        kind="binary",
        classes=(0, 1),
        outputs={"label": "label", "probabilities": "probabilities"},
        decision_threshold=0.3,
        string_ops=True,
        feast=FEAST,
    ),
    "binary-scores": ServingContract(
        layout="matrix",
        columns=MATRIX,
        feature_names=("amount", "risk"),
        kind="binary",
        classes=(False, True),
        outputs={"label": "label", "scores": "scores"},
    ),
    "multiclass-strings": ServingContract(
        layout="matrix",
        columns=MATRIX,
        feature_names=("amount", "risk"),
        kind="multiclass",
        classes=("low", "mid", "high"),
        outputs={"label": "label", "probabilities": "probabilities"},
        feast=FEAST,
        explainer=Explainer("m_explain", "tree_path_dependent", "log_odds", ("low", "mid", "high")),
    ),
    "regression-3-targets": ServingContract(
        layout="columns",
        columns=TYPED,
        feature_names=tuple(c.name for c in TYPED),
        kind="regression",
        outputs={"value": "prediction"},
        targets=3,
    ),
    "outlier": ServingContract(
        layout="matrix",
        columns=MATRIX,
        feature_names=("amount", "risk"),
        kind="outlier",
        outputs={"label": "label", "score": "score"},
        score=OutlierScore("decision_function", 0.0),
    ),
    "cluster": ServingContract(
        layout="matrix",
        columns=MATRIX,
        feature_names=("amount", "risk"),
        kind="cluster",
        outputs={"label": "label", "distances": "distances"},
        clusters=4,
    ),
    "other": ServingContract(layout="tensors", kind="other", outputs={}),
    "legacy": ServingContract(layout="matrix", feature_names=("amount", "risk"), feast=FEAST),
}


@pytest.mark.parametrize("name", CONTRACTS)
def test_every_fact_survives_the_config_parameters(name: str) -> None:
    contract = CONTRACTS[name]
    params = contract.to_parameters()
    assert all(isinstance(v, str) for v in params.values())  # what a config's string_value holds
    assert ServingContract.from_parameters(params) == contract
    assert ServingContract.from_parameters(params, check=False) == contract


@pytest.mark.parametrize("name", CONTRACTS)
def test_every_fact_survives_metadata_json(name: str) -> None:
    contract = CONTRACTS[name]
    metadata = json.loads(json.dumps(contract.to_metadata()))  # through the file's own text
    assert set(metadata) == {"serving", "tags"}
    assert ServingContract.from_metadata(metadata) == contract


def test_the_cases_set_every_field() -> None:
    """Each field of the contract is set (not its default) by some case above, so the round
    trips cover all of them."""
    for f in dataclasses.fields(ServingContract):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert any(getattr(c, f.name) != default for c in CONTRACTS.values()), f.name


def test_the_written_text_is_the_documented_one() -> None:
    """The parameters as builder export writes them (docs/serving-contract.md): a string as is,
    anything else as JSON; the run's feast.* tags as logged."""
    assert CONTRACTS["binary"].to_parameters() == {
        **FEAST,
        "serving.layout": "columns",
        "serving.columns": json.dumps([c.to_dict() for c in TYPED]),
        "serving.feature_names": '["amount", "channel", "visits", "vip"]',
        "serving.kind": "binary",
        "serving.classes": "[0, 1]",
        "serving.outputs": '{"label": "label", "probabilities": "probabilities"}',
        "serving.decision_threshold": "0.3",
        "serving.string_ops": "true",
    }
    assert CONTRACTS["outlier"].to_parameters()["serving.score"] == (
        '{"source": "decision_function", "outlier_below": 0.0}'
    )
    assert CONTRACTS["regression-3-targets"].to_parameters()["serving.targets"] == "3"
    assert CONTRACTS["cluster"].to_parameters()["serving.clusters"] == "4"
    assert CONTRACTS["multiclass-strings"].facts()["classes"] == ["low", "mid", "high"]
    assert json.loads(CONTRACTS["multiclass-strings"].to_parameters()["serving.explainer"]) == {
        "model": "m_explain",
        "method": "tree_path_dependent",
        "units": "log_odds",
        "outputs": ["low", "mid", "high"],
        "contributions": "contributions",
        "base_value": "base_value",
    }
    other = CONTRACTS["other"].to_parameters()
    assert other == {"serving.layout": "tensors", "serving.kind": "other", "serving.outputs": "{}"}


def test_typed_views_read_the_feast_tags_and_the_older_exports() -> None:
    binary = CONTRACTS["binary"]
    assert binary.feature_service == "fraud_v1" and binary.missing_feast() == []
    assert binary.entity_keys == ("user_id", "merchant_id")  # comma-separated
    assert binary.request_fields == ("amount", "channel")  # JSON
    assert binary.roles.probabilities == "probabilities" and binary.roles.scores is None
    legacy = ServingContract.from_parameters({"serving.feature_names": '["a", "b"]'})
    assert legacy.legacy and legacy.layout == "matrix"
    assert legacy.input_columns == (Column("a", "float32"), Column("b", "float32"))
    assert ServingContract().missing_feast() == list(keys.FEAST_KEYS)


def test_parameters_outside_the_contract_are_left_alone() -> None:
    params = {
        **CONTRACTS["outlier"].to_parameters(),
        "drift.reference": "{}",
        "serving.champion_version": "3",
        "builder.export_identity": "abc",
        "user.step": "x",
    }
    assert ServingContract.from_parameters(params) == CONTRACTS["outlier"]
    assert {
        "drift.reference",
        "serving.champion_version",
        "builder.export_identity",
        "builder.export",
    } == keys.VERSION_PARAMETERS


OUTLIER = CONTRACTS["outlier"].to_parameters()
BINARY = CONTRACTS["binary"].to_parameters()


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({**OUTLIER, "serving.kind": "anomaly"}, "unknown serving.kind 'anomaly' (binary, multiclass, "),
        ({**BINARY, "serving.classes": "[0, 1"}, "serving.classes is not valid JSON"),
        (
            {**BINARY, "serving.classes": "[[0], [1]]"},
            "serving.classes must be a JSON list of numbers or strings",
        ),
        ({k: v for k, v in BINARY.items() if k != "serving.classes"}, "a binary model needs serving.classes"),
        ({**BINARY, "serving.classes": "[0, 1, 2]"}, "a binary model has 2 classes, serving.classes has 3"),
        ({k: v for k, v in OUTLIER.items() if k != "serving.score"}, "an outlier model needs serving.score"),
        (
            {**OUTLIER, "serving.score": '{"source": "d"}'},
            "serving.score must be a JSON object with a source",
        ),
        ({**OUTLIER, "serving.outputs": '{"label": "label"}'}, "an outlier model needs a score output"),
        ({**BINARY, "serving.layout": "grid"}, "unknown serving.layout 'grid' (matrix, columns or tensors)"),
        ({**BINARY, "serving.columns": "[{"}, "serving.columns is not valid JSON"),
        ({**BINARY, "serving.columns": "[]"}, "serving.columns must be a non-empty JSON list"),
        ({**BINARY, "serving.outputs": '["label"]'}, "serving.outputs must be a JSON object"),
        (
            {**BINARY, "serving.decision_threshold": "1.5"},
            "serving.decision_threshold '1.5' is not a number in [0, 1]",
        ),
        ({**BINARY, "serving.targets": "2"}, "serving.targets applies to regression models, not binary"),
        ({**OUTLIER, "serving.clusters": "two"}, "serving.clusters applies to cluster models, not outlier"),
        ({**BINARY, "feast.entity_keys": "[user_id"}, "feast.entity_keys is not valid JSON"),
    ],
)
def test_a_malformed_contract_is_an_error_naming_the_key(params: dict[str, str], fragment: str) -> None:
    with pytest.raises(ContractError) as err:
        ServingContract.from_parameters(params)
    assert fragment in str(err.value)


def test_the_same_rules_hold_for_metadata_json() -> None:
    metadata = CONTRACTS["regression-3-targets"].to_metadata()
    metadata["serving"]["targets"] = 0
    with pytest.raises(ContractError, match=r"serving\.targets 0 is not a whole number >= 1"):
        ServingContract.from_metadata(metadata)
    metadata["serving"]["targets"] = True  # JSON's true is no count
    with pytest.raises(ContractError, match="not a whole number"):
        ServingContract.from_metadata(metadata)
    with pytest.raises(ContractError, match="must be JSON objects"):
        ServingContract.from_metadata({"serving": ["layout"]})


def test_a_client_that_only_sends_rows_reads_without_the_rules_between_facts() -> None:
    """The MLflow plugin and the load tests read a contract the gateway would refuse (a
    threshold on a classifier without probabilities), but never one they cannot decode."""
    svc_threshold = {**CONTRACTS["binary-scores"].to_parameters(), "serving.decision_threshold": "0.3"}
    with pytest.raises(ContractError, match="applies to probabilities"):
        ServingContract.from_parameters(svc_threshold)
    lenient = ServingContract.from_parameters(svc_threshold, check=False)
    assert lenient.columns == MATRIX and lenient.decision_threshold == 0.3
    with pytest.raises(ContractError, match="not valid JSON"):
        ServingContract.from_parameters({**svc_threshold, "serving.columns": "[{"}, check=False)


def test_the_module_needs_the_standard_library_only() -> None:
    """builder, the gateway (and its image), the load tests and the MLflow plugin all import it."""
    found = []
    for path in sorted((ROOT / "serving_contract").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("__future__", "serving_contract"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert found == []


def test_the_gateway_reports_a_contract_error_with_the_model_name() -> None:
    from gateway.catalog import spec_from_config
    from gateway.errors import SpecError

    params = {**BINARY, "serving.kind": "ranking"}
    config = {"parameters": {k: {"string_value": v} for k, v in params.items()}}
    with pytest.raises(SpecError) as err:
        spec_from_config("m", "m", "1", config, {})
    kinds = "binary, multiclass, regression, outlier, cluster, other"
    assert err.value.message == f"model 'm': unknown serving.kind 'ranking' ({kinds})"
    assert err.value.cause == "unservable_model"
