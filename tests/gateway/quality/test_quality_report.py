"""``gateway quality report`` (gateway/quality/offline.py, html.py, cli.py) on a payload log
written here with the gateway's own layout (gateway/payload_log/layout.py ``to_table`` and
``ParquetSink``), joined with labels by prediction id, by entity and time, and from a Feast
feature view; no servers. Expected metrics are computed here by hand from the same rows.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from gateway.catalog import Column, ModelSpec, OutputRoles
from gateway.cli import app
from gateway.observe import ChallengerAnswer, Observation
from gateway.payload_log.layout import log_date, to_table
from gateway.payload_log.sink import ParquetSink
from gateway.quality.offline import build, read_labels
from gateway.responses import Prediction

MODEL, CHALLENGER = "fraud-detector", "fraud-gbm"
T0 = 1_800_000_000.0  # 2027-01-15
N1, N2, SHADOWED = 60, 40, 40


def spec(version: str, name: str = MODEL) -> ModelSpec:
    return ModelSpec(
        name=name, triton_model=name, version=version, layout="columns", input_name="",
        columns=(Column("amount", "float32"),), feature_service="fs",
        entity_keys=(Column("user_id", "int64"),), request_fields=("amount",),
        kind="binary", classes=(0, 1), roles=OutputRoles(label="label", probabilities="probabilities"),
        outputs=(), decision_threshold=0.5,
    )  # fmt: skip


def scored(scores: list[float]) -> list[Prediction]:
    return [Prediction(False, score=p, label=int(p >= 0.5), probabilities=(1 - p, p)) for p in scores]


def hand_auc(truth: list[bool], score: list[float]) -> float:
    pos = [s for y, s in zip(truth, score, strict=True) if y]
    neg = [s for y, s in zip(truth, score, strict=True) if not y]
    return sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg) / (len(pos) * len(neg))


class Logged:
    """The log (version 1 at T0 with a challenger on its first rows, version 2 an hour later),
    the model repository, and every row's truth and scores."""

    def __init__(self, root: Path) -> None:
        rng = random.Random(5)
        self.log, self.repo = root / "log", root / "repo"
        self.truth = [rng.random() < 0.4 for _ in range(N1 + N2)]
        self.champion = [min(max(rng.gauss(0.7 if y else 0.3, 0.2), 0.0), 1.0) for y in self.truth]
        self.challenger = [
            min(max(rng.gauss(0.6 if y else 0.4, 0.2), 0.0), 1.0) for y in self.truth[:SHADOWED]
        ]
        self.ids = [f"req{i // 3}-{i % 3}" for i in range(N1)] + [f"late{i}-0" for i in range(N2)]
        shadow = ChallengerAnswer(
            spec("7", CHALLENGER), "7", [*scored(self.challenger), *([None] * (N1 - SHADOWED))]
        )
        first = self._observation(spec("1"), 0, N1, T0, shadow)
        second = self._observation(spec("2"), N1, N2, T0 + 3600, None)
        sink = ParquetSink(str(self.log))
        for observation in (first, second):
            table = to_table(observation, np.arange(observation.rows), {}, None)
            sink.write(MODEL, log_date(observation.at), table)
        for version in ("1", "2"):
            folder = self.repo / MODEL / version
            folder.mkdir(parents=True)
            serving = {"kind": "binary", "classes": [0, 1], "decision_threshold": 0.5,
                       "outputs": {"label": "label", "probabilities": "probabilities"}}  # fmt: skip
            (folder / "metadata.json").write_text(json.dumps({"serving": serving}))

    def _observation(
        self, s: ModelSpec, first: int, n: int, at: float, shadow: ChallengerAnswer | None
    ) -> Observation:
        return Observation(
            spec=s,
            version=s.version,
            inputs={"amount": np.arange(n, dtype=np.float32).reshape(n, 1)},
            predictions=scored(self.champion[first : first + n]),
            entity_rows=[{"user_id": i} for i in range(n)],  # version 2 serves users 0..39 again
            at=at,
            prediction_ids=self.ids[first : first + n],
            challenger=shadow,
        )


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Logged:
    return Logged(tmp_path_factory.mktemp("quality"))


def by_id_labels(logged: Logged, path: Path) -> None:
    rows = [{"prediction_id": i, "label": int(y)} for i, y in zip(logged.ids, logged.truth, strict=True)]
    rows += [
        {"prediction_id": logged.ids[0], "label": int(logged.truth[0])},  # duplicate
        {"prediction_id": logged.ids[1], "label": 1 - int(logged.truth[1])},  # conflicting
        {"prediction_id": "never-served", "label": 1},  # unknown
        {"prediction_id": logged.ids[2], "label": "maybe"},  # invalid
    ]
    pd.DataFrame(rows).to_csv(path, index=False)


def metrics_of(report: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(v["model"], v["version"], v["role"]): v for v in report["versions"]}


def test_json_report_by_prediction_id(logged: Logged, tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    by_id_labels(logged, labels)
    result = CliRunner().invoke(
        app,
        ["quality", "report", "--log", str(logged.log), "--labels", str(labels), "--repo", str(logged.repo),
         "--model", MODEL, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report) == ["model", "kind", "window", "window_seconds", "versions", "feedback"]
    assert report["kind"] == "binary" and report["window_seconds"] == 3600
    assert report["window"] == "2027-01-15T08:00:00Z/2027-01-15T09:00:00Z"
    assert report["feedback"] == {
        "accepted": 100,
        "duplicate": 1,
        "conflicting": 1,
        "unknown": 1,
        "invalid": 1,
        "expired": 0,  # the live API's outcome for a label past the store's TTL; never offline
    }
    versions = metrics_of(report)
    assert list(versions) == [
        (MODEL, "2", "champion"),
        (MODEL, "1", "champion"),
        (CHALLENGER, "7", "challenger"),
    ]
    v1, v2, ch = versions[(MODEL, "1", "champion")], versions[(MODEL, "2", "champion")], versions[
        (CHALLENGER, "7", "challenger")]  # fmt: skip
    assert (v1["rows"], v2["rows"], ch["rows"]) == (N1, N2, SHADOWED)
    t, c = logged.truth, logged.champion
    assert v1["metrics"]["auc"] == pytest.approx(hand_auc(t[:N1], c[:N1]))
    assert v2["metrics"]["auc"] == pytest.approx(hand_auc(t[N1:], c[N1:]))
    assert ch["metrics"]["auc"] == pytest.approx(hand_auc(t[:SHADOWED], logged.challenger))
    hits = sum(1 for y, p in zip(t[:N1], c[:N1], strict=True) if (p >= 0.5) == y)
    assert v1["metrics"]["accuracy"] == pytest.approx(hits / N1)


def test_labels_by_entity_and_time(logged: Logged, tmp_path: Path) -> None:
    def at(seconds: float) -> str:
        return dt.datetime.fromtimestamp(T0 + seconds, dt.UTC).isoformat()

    rows = [
        {"user_id": 45, "event_timestamp": at(600), "label": int(logged.truth[45])},  # v1 row 45
        {"user_id": 5, "event_timestamp": at(1800), "label": int(logged.truth[5])},  # v1 row 5 (v2 not yet)
        {"user_id": 5, "event_timestamp": at(7200), "label": int(logged.truth[N1 + 5])},  # v2's user 5
        {"user_id": 6, "event_timestamp": at(-60), "label": 1},  # before any prediction: unknown
        {"user_id": 999, "event_timestamp": at(600), "label": 1},  # no such entity: unknown
        {"user_id": 45, "event_timestamp": at(900), "label": 1 - int(logged.truth[45])},  # conflicting
    ]
    path = tmp_path / "labels.parquet"
    pd.DataFrame(rows).to_parquet(path)
    built = build(str(logged.log), read_labels(path), logged.repo, MODEL)
    assert built.report.feedback == {
        "accepted": 3,
        "duplicate": 0,
        "conflicting": 1,
        "unknown": 2,
        "invalid": 0,
        "expired": 0,
    }
    rows_by = {(v.model, v.version, v.role): v.rows for v in built.report.versions}
    assert rows_by == {
        (MODEL, "2", "champion"): 1,
        (MODEL, "1", "champion"): 2,
        (CHALLENGER, "7", "challenger"): 1,
    }
    accuracy = built.report.versions[1].metrics["accuracy"]
    want = sum((logged.champion[i] >= 0.5) == logged.truth[i] for i in (45, 5)) / 2
    assert accuracy == pytest.approx(want)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Cells(HTMLParser):
    """Every element's tag, and each table's cells as text, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table = ""
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "table":
            self._table = dict(attrs).get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr":
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def html_report(logged: Logged, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("html")
    by_id_labels(logged, folder / "labels.csv")
    out = folder / "report.html"
    result = CliRunner().invoke(
        app,
        ["quality", "report", "--log", str(logged.log), "--labels", str(folder / "labels.csv"),
         "--repo", str(logged.repo), "--model", MODEL, "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def check_dom(dom: str, logged: Logged) -> None:
    parsed = Cells()
    parsed.feed(dom)
    quality = parsed.tables["quality"]
    assert quality[0][2:] == [f"champion {MODEL} v2", f"champion {MODEL} v1", f"challenger {CHALLENGER} v7"]
    by_metric = {row[0]: row[2:] for row in quality[1:]}
    assert by_metric["labeled rows"] == [str(N2), str(N1), str(SHADOWED)]
    aucs = [
        hand_auc(logged.truth[N1:], logged.champion[N1:]),
        hand_auc(logged.truth[:N1], logged.champion[:N1]),
        hand_auc(logged.truth[:SHADOWED], logged.challenger),
    ]
    assert by_metric["auc"] == [f"{a:.4f}" for a in aucs]
    joins = {row[0]: row[1] for row in parsed.tables["join"][1:]}
    assert joins == {"accepted": "100", "duplicate": "1", "conflicting": "1", "unknown": "1", "invalid": "1"}
    assert "svg" in parsed.tags and parsed.tags.count("circle") >= 3  # the reliability plot
    # the comparison in words, above the table, on each side's own labeled rows
    text = " ".join(re.sub(r"<[^>]+>", "", dom).split())
    assert f"challenger {CHALLENGER} v7 against champion {MODEL} v1: better on these labels" in text
    assert "better on 4 of 6 metrics (auc" in text and f"{SHADOWED} vs {N1} labeled rows" in text
    assert "decision threshold" in text and "area grows with the rows in its bin" in text


def test_html_report_has_the_tables_and_the_plot(html_report: Path, logged: Logged) -> None:
    check_dom(html_report.read_text(), logged)


def test_html_report_in_a_headless_browser(html_report: Path, logged: Logged) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on this machine (/usr/bin/chromium); the HTML is parsed by the test above")
    dom = subprocess.run(
        [browser, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom", html_report.as_uri()],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    check_dom(dom, logged)


@pytest.mark.parametrize(
    ("labels_text", "words"),
    [
        (None, "no labels file"),
        ("prediction_id,truth\nx,1\n", "no 'label' column"),
        ("user_id,label\n1,1\n", "neither 'prediction_id'"),
        ("prediction_id,label\nnope,1\nnada,0\n", "no label joined"),
        ("prediction_id,label\n", "has no rows"),
    ],
)
def test_bad_inputs_exit_2_with_one_error_line(
    logged: Logged, tmp_path: Path, labels_text: str | None, words: str
) -> None:
    labels = tmp_path / "labels.csv"
    if labels_text is not None:
        labels.write_text(labels_text)
    result = CliRunner().invoke(
        app,
        ["quality", "report", "--log", str(logged.log), "--labels", str(labels), "--repo", str(logged.repo),
         "--model", MODEL, "--json"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], result.stderr
    assert "Traceback" not in result.output and result.stdout == ""


def test_other_refusals(logged: Logged, tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    by_id_labels(logged, labels)
    base = ["quality", "report", "--labels", str(labels), "--model", MODEL]
    for args, words in (
        (["--log", str(logged.log), "--repo", str(tmp_path / "nope")], "is not a folder"),
        (["--log", str(tmp_path / "nolog"), "--repo", str(logged.repo)], "no payload log"),
        (["--log", str(logged.log), "--repo", str(tmp_path)], "no metadata.json"),
    ):
        result = CliRunner().invoke(app, [*base, *args])
        assert result.exit_code == 2, result.output
        assert words in result.stderr, result.stderr


def test_labels_from_a_feast_feature_view(logged: Logged, tmp_path: Path) -> None:
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast.types import Int64

    repo = tmp_path / "feast"
    (repo / "data").mkdir(parents=True)
    (repo / "feature_store.yaml").write_text(
        "project: labels\nprovider: local\nregistry: data/registry.db\noffline_store:\n  type: file\n"
        "online_store:\n  type: sqlite\n  path: data/online.db\nentity_key_serialization_version: 3\n"
    )
    # a chargeback view: a user's label as of a time (here: row i's truth, from before both versions)
    frame = pd.DataFrame(
        {
            "user_id": np.arange(N1, dtype=np.int64),
            "label": np.array([int(y) for y in logged.truth[:N1]], dtype=np.int64),
            "event_timestamp": pd.Timestamp(T0 - 60, unit="s", tz="UTC"),
        }
    )
    frame.to_parquet(repo / "data" / "chargebacks.parquet")
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
    source = FileSource(name="chargebacks_source", path=str(repo / "data" / "chargebacks.parquet"),
                        timestamp_field="event_timestamp")  # fmt: skip
    view = FeatureView(
        name="chargebacks", entities=[user], ttl=dt.timedelta(days=1),
        schema=[Field(name="label", dtype=Int64)], source=source, online=False,
    )  # fmt: skip
    FeatureStore(repo_path=str(repo)).apply([user, view])

    result = CliRunner().invoke(
        app,
        ["quality", "report", "--log", str(logged.log), "--labels-feature-view", "chargebacks",
         "--feature-repo", str(repo), "--repo", str(logged.repo), "--model", MODEL, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # every logged row whose user has a label: all 60 of version 1, and version 2's users 0..39
    versions = metrics_of(report)
    assert versions[(MODEL, "1", "champion")]["rows"] == N1
    assert versions[(MODEL, "2", "champion")]["rows"] == N2
    assert report["feedback"]["accepted"] == N1 + N2
    assert versions[(MODEL, "1", "champion")]["metrics"]["auc"] == pytest.approx(
        hand_auc(logged.truth[:N1], logged.champion[:N1])
    )


def test_rows_a_fallback_answered_are_scored_as_the_model_that_answered(tmp_path: Path) -> None:
    """While switched to its fallback (gateway/fallback/), the model's rows are answered by
    another model: the log says so (``__answered_by``), and the report scores those rows under
    that model, with its own contract, beside the champion's."""
    import dataclasses

    rng = random.Random(9)
    truth = [rng.random() < 0.4 for _ in range(50)]
    score = [min(max(rng.gauss(0.7 if y else 0.3, 0.25), 0.0), 1.0) for y in truth]
    ids = [f"fb{i}-0" for i in range(50)]
    standing_in = dataclasses.replace(spec("7", CHALLENGER), name=MODEL, answered_by=CHALLENGER)
    sink = ParquetSink(str(tmp_path / "log"))
    for s, part in ((spec("1"), slice(0, 30)), (standing_in, slice(30, 50))):
        n = part.stop - part.start
        observation = Observation(
            spec=s, version=s.version, inputs={"amount": np.zeros((n, 1), dtype=np.float32)},
            predictions=scored(score[part]), entity_rows=[{"user_id": i} for i in range(n)], at=T0,
            prediction_ids=ids[part],
        )  # fmt: skip
        sink.write(MODEL, log_date(T0), to_table(observation, np.arange(n), {}, None))
    serving = {"kind": "binary", "classes": [0, 1], "decision_threshold": 0.5,
               "outputs": {"label": "label", "probabilities": "probabilities"}}  # fmt: skip
    for model, version in ((MODEL, "1"), (CHALLENGER, "7")):
        (tmp_path / "repo" / model / version).mkdir(parents=True)
        (tmp_path / "repo" / model / version / "metadata.json").write_text(json.dumps({"serving": serving}))
    labels = tmp_path / "labels.csv"
    pd.DataFrame({"prediction_id": ids, "label": [int(y) for y in truth]}).to_csv(labels, index=False)

    built = build(str(tmp_path / "log"), read_labels(labels), tmp_path / "repo", MODEL)
    versions = {(v.model, v.version, v.role): v for v in built.report.versions}
    assert list(versions) == [(MODEL, "1", "champion"), (CHALLENGER, "7", "champion")]
    assert (versions[(MODEL, "1", "champion")].rows, versions[(CHALLENGER, "7", "champion")].rows) == (30, 20)
    got = versions[(CHALLENGER, "7", "champion")].metrics["auc"]
    assert got == pytest.approx(hand_auc(truth[30:], score[30:]))
    assert built.notes == ()  # each model's own contract: nothing borrowed
