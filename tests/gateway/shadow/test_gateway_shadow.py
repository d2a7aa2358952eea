"""Shadow traffic on the real stack: a challenger version loaded beside the champion
(``builder export --keep-serving``), the gateway mirroring every request to it, Triton, Feast.

The model is exported again under a name of its own (``fraud-shadow``) into the session's
repository and loaded through Triton's repository API (the session Triton runs in explicit
mode), so no other test's model changes. The challenger is another registered version of the
same model, boosted for 5 rounds where the champion had 20, so the two answer differently.

What a user would check, computed here from the same rows: the champion's answers are the
champion's (its scikit-learn pipeline on the logged inputs), the report's agreement and score
difference equal those of the two pipelines on the rows the gateway logged, the payload log
carries the challenger's answer beside the champion's, and `gateway shadow` reads it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import requests

from support import servers
from tests.gateway.helpers import MODEL, Stack, gateway_env, like_training, rank_auc

pytestmark = pytest.mark.integration

NAME = "fraud-shadow"
THRESHOLD = 0.35  # support/train.py's default decision threshold, both versions


@dataclass
class Shadowed:
    gateway: servers.Gateway
    log_dir: Path
    champion: Any  # support.train.Trained
    challenger: Any


@pytest.fixture(scope="module")
def shadowed(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shadowed]:
    import mlflow
    import tritonclient.http as httpclient

    from builder.export import ExportRequest, export_model
    from support.train import train_and_register

    export_model(ExportRequest(f"models:/{MODEL}@champion", stack.model_repo, name=NAME))
    experiment = mlflow.get_experiment_by_name("tests").experiment_id
    challenger = train_and_register(stack.store, MODEL, experiment, n_estimators=5, alias="challenger")
    export_model(ExportRequest(f"models:/{MODEL}@challenger", stack.model_repo, name=NAME, keep_serving=True))
    client = httpclient.InferenceServerClient(stack.triton.http_url)
    client.load_model(NAME)
    assert client.is_model_ready(NAME, str(stack.trained.version))
    assert client.is_model_ready(NAME, str(challenger.version))

    root = tmp_path_factory.mktemp("gw-shadow")
    env = gateway_env(
        stack,
        GATEWAY_MODELS=f'["{NAME}"]',
        GATEWAY_MISSING_ENTITIES="default",
        GATEWAY_SHADOW=json.dumps({NAME: {"share": 1.0, "tolerance": 0.05}}),
        GATEWAY_PAYLOAD_LOG=str(root / "log"),
        GATEWAY_PAYLOAD_LOG_FLUSH_S="0.2",
    )
    try:
        with servers.gateway_process(root, env) as gw:
            yield Shadowed(gw, root / "log", stack.trained, challenger)
    finally:
        client.unload_model(NAME)
        client.close()


def served_inputs(frame: pd.DataFrame, trained: Any) -> pd.DataFrame:
    """The model's input frame from logged rows: request fields by name, online features from
    their ``{view}__{feature}`` columns (null where the store had none, as the model saw NaN)."""
    from support.train import model_frame

    columns = {}
    for name in trained.columns:
        if name in frame:
            columns[name] = frame[name]
            continue
        (logged,) = [c for c in frame.columns if c.endswith(f"__{name}")]
        columns[name] = frame[logged]
    return model_frame(pd.DataFrame(columns), trained.string_columns)


def read_log(log_dir: Path, rows: int) -> pd.DataFrame:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        files = sorted(log_dir.rglob("*.parquet"))
        if files:
            frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
            if len(frame) >= rows and frame["__challenger_version"].notna().sum() >= rows:
                return frame
        time.sleep(0.2)
    raise AssertionError(f"the payload log did not get {rows} rows with the challenger's answer")


def shadow_report(gw: servers.Gateway, rows: int) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        body = requests.get(f"{gw.url}/v1/models/{NAME}/shadow", params={"window": "5m"}, timeout=10).json()
        if body.get("rows", 0) + body.get("error_rows", 0) >= rows or time.monotonic() > deadline:
            return dict(body)
        time.sleep(0.1)


def test_the_champion_answers_and_the_report_equals_the_two_pipelines_on_the_logged_rows(
    stack: Stack, shadowed: Shadowed
) -> None:
    rows = like_training(stack, 240, seed=7)
    ids: dict[str, dict[str, Any]] = {}
    with requests.Session() as session:
        for i in range(0, len(rows), 16):
            response = session.post(
                f"{shadowed.gateway.url}/v1/models/{NAME}/predict",
                json={"rows": rows[i : i + 16]},
                timeout=10,
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["version"] == str(shadowed.champion.version)  # pinned: not the newer challenger
            assert [p["id"] for p in body["predictions"]] == [
                f"{body['id']}-{j}" for j in range(len(body["predictions"]))
            ]
            ids.update({p["id"]: p for p in body["predictions"]})
    assert len(ids) == 240

    report = shadow_report(shadowed.gateway, 240)
    frame = read_log(shadowed.log_dir, 240)
    assert set(frame["__prediction_id"]) == set(ids)
    x = served_inputs(frame, shadowed.champion)
    ours = shadowed.champion.model.predict_proba(x)[:, 1]
    theirs = shadowed.challenger.model.predict_proba(x)[:, 1]

    # the champion's answers are its own pipeline's (the gateway named its version)
    answered = np.array([ids[i]["score"] for i in frame["__prediction_id"]])
    np.testing.assert_allclose(answered, ours, atol=1e-5)
    assert np.abs(ours - theirs).max() > 0.01, "the two versions should answer differently"

    assert report["enabled"] is True and report["error_rows"] == 0 and report["dropped_rows"] == 0
    assert report["champion"] == {"model": NAME, "version": str(shadowed.champion.version)}
    assert report["challenger"] == {"model": NAME, "version": str(shadowed.challenger.version)}
    assert report["rows"] == 240
    own_agreement = np.mean((ours >= THRESHOLD) == (theirs >= THRESHOLD))
    assert report["agreement"] == pytest.approx(own_agreement, abs=1.5 / 240)  # a row on the threshold
    difference = np.abs(ours - theirs)
    assert report["difference"]["mean"] == pytest.approx(difference.mean(), abs=1e-5)
    assert report["difference"]["max"] == pytest.approx(difference.max(), abs=1e-5)
    assert report["difference"]["beyond_tolerance"] == pytest.approx(
        np.mean(difference > 0.05), abs=1.5 / 240
    )
    assert report["score_psi"] is not None and report["score_psi"] >= 0
    assert report["challenger_latency_ms"]["p99"] > 0

    # the log has the challenger's answer beside the champion's, row by row
    np.testing.assert_allclose(frame["__challenger_score"].to_numpy(), theirs, atol=1e-5)
    assert set(frame["__challenger_version"]) == {str(shadowed.challenger.version)}

    # `gateway shadow` reads the same report
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "shadow",
            "--url",
            shadowed.gateway.url,
            "--model",
            NAME,
            "--window",
            "5m",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    (printed,) = json.loads(cli.stdout)["reports"]
    assert printed["rows"] >= 240 and printed["agreement"] == pytest.approx(report["agreement"], abs=0.02)
    table = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "shadow",
            "--url",
            shadowed.gateway.url,
            "--model",
            NAME,
            "--window",
            "5m",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert table.returncode == 0 and "label agreement" in table.stdout


def test_the_shadow_report_of_an_unshadowed_model_and_a_bad_window(shadowed: Shadowed) -> None:
    gw = shadowed.gateway
    off = requests.get(f"{gw.url}/v1/models/{MODEL}/shadow", timeout=10)
    assert off.status_code == 200 and off.json()["enabled"] is False
    bad = requests.get(f"{gw.url}/v1/models/{NAME}/shadow", params={"window": "forever"}, timeout=10)
    assert bad.status_code == 400 and "window" in bad.json()["error"]
    unknown = requests.get(f"{gw.url}/v1/models/no-such-model/shadow", timeout=10)
    assert unknown.status_code == 404


def test_labels_fed_back_score_both_versions_and_bad_labels_are_counted(
    stack: Stack, shadowed: Shadowed
) -> None:
    gw = shadowed.gateway
    rows = like_training(stack, 160, seed=11)
    answers: list[dict[str, Any]] = []
    with requests.Session() as session:
        for i in range(0, len(rows), 16):
            response = session.post(
                f"{gw.url}/v1/models/{NAME}/predict", json={"rows": rows[i : i + 16]}, timeout=10
            )
            assert response.status_code == 200, response.text
            answers.extend(response.json()["predictions"])
    shadow_report(gw, 240 + 160)  # the challenger has answered these too
    frame = read_log(shadowed.log_dir, 240 + 160).set_index("__prediction_id")
    ids = [a["id"] for a in answers]
    champion = np.array([a["score"] for a in answers])
    challenger = frame.loc[ids, "__challenger_score"].to_numpy()
    truth = np.random.default_rng(5).random(len(ids)) < champion  # labels that follow the champion's odds

    labels = [{"id": i, "label": int(t)} for i, t in zip(ids, truth, strict=True)]
    hostile = [
        labels[0],  # the same label again: a duplicate
        {"id": labels[1]["id"], "label": 1 - labels[1]["label"]},  # another label: conflicting
        {"id": "no-such-prediction-0", "label": 1},  # unknown
        {"id": labels[2]["id"], "label": "maybe"},  # not a class: invalid
    ]
    sent = requests.post(f"{gw.url}/v1/models/{NAME}/feedback", json={"labels": labels + hostile}, timeout=10)
    assert sent.status_code == 200, sent.text
    outcome = sent.json()
    assert {k: outcome[k] for k in ("accepted", "duplicate", "conflicting", "unknown", "invalid")} == {
        "accepted": 160,
        "duplicate": 1,
        "conflicting": 1,
        "unknown": 1,
        "invalid": 1,
    }
    assert {e["outcome"] for e in outcome["errors"]} == {"duplicate", "conflicting", "unknown", "invalid"}
    again = requests.post(f"{gw.url}/v1/models/{NAME}/feedback", json={"labels": labels[:10]}, timeout=10)
    assert again.json()["duplicate"] == 10 and again.json()["accepted"] == 0  # idempotent

    report = requests.get(f"{gw.url}/v1/models/{NAME}/quality", params={"window": "5m"}, timeout=30).json()
    by_role = {v["role"]: v for v in report["versions"]}
    assert (
        by_role["champion"]["version"] == str(shadowed.champion.version)
        and by_role["champion"]["rows"] == 160
    )
    assert by_role["challenger"]["version"] == str(shadowed.challenger.version)
    assert by_role["challenger"]["rows"] == 160
    assert by_role["champion"]["metrics"]["auc"] == pytest.approx(rank_auc(truth, champion), abs=1e-6)
    assert by_role["challenger"]["metrics"]["auc"] == pytest.approx(rank_auc(truth, challenger), abs=1e-4)
    own_accuracy = np.mean((champion >= THRESHOLD) == truth)
    assert by_role["champion"]["metrics"]["accuracy"] == pytest.approx(own_accuracy)

    # a body that is not labels, and an unknown model: clear 4xx, and the gateway still answers
    bad = requests.post(f"{gw.url}/v1/models/{NAME}/feedback", json={"labels": "yes"}, timeout=10)
    assert bad.status_code in (400, 422) and bad.json()["error"]
    junk = requests.post(f"{gw.url}/v1/models/{NAME}/feedback", data=b"\xff{", timeout=10)
    assert junk.status_code == 400
    unknown = requests.post(f"{gw.url}/v1/models/nope/feedback", json={"labels": []}, timeout=10)
    assert unknown.status_code == 404
    ok = requests.post(f"{gw.url}/v1/models/{NAME}/predict", json=rows[0], timeout=10)
    assert ok.status_code == 200
