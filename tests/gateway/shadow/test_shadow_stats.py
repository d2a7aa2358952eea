"""Shadow traffic's runner and figures, with a stand-in for Triton (the real stack's test is
tests/gateway/shadow/test_gateway_shadow.py): every figure of the report against what this test
computes itself from the same rows; a saturated or failing challenger is counted, and never
reaches the champion's caller; a challenger that cannot be compared says why."""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.catalog import ModelSpec, spec_from_config
from gateway.errors import ModelNotFound, Unavailable
from gateway.evidence.sqlite_store import SqliteEvidence
from gateway.evidence.writer import EvidenceWriter
from gateway.observe import Observation
from gateway.payload_log.layout import to_table
from gateway.responses import predictions
from gateway.settings import ShadowTarget
from gateway.shadow.runner import ShadowRunner, Watchers
from tests.gateway.core.helpers import KEYS, config

BINARY = {
    "serving.kind": "binary",
    "serving.classes": [0, 1],
    "serving.outputs": {"label": "label", "probabilities": "probabilities"},
}


def binary_spec(name: str = "m", **change: Any) -> ModelSpec:
    cfg = config({**BINARY, **change}, {"label": ["1"], "probabilities": ["2"]})
    return spec_from_config(name, name, "1", cfg, KEYS)


def probability(version: str, amount: np.ndarray) -> np.ndarray:
    """Version 1: a logistic curve of amount; version 2: the same, +0.2 past amount 50."""
    p = 1 / (1 + np.exp(-(amount - 40) / 10))
    return np.clip(p + 0.2 * (amount > 50), 0, 1) if version == "2" else p


def answer(version: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    p = probability(version, inputs["amount"][:, 0].astype(np.float64)).astype(np.float32)
    return {"label": (p >= 0.5).astype(np.int64).reshape(-1, 1), "probabilities": np.stack([1 - p, p], 1)}


class StandInTriton:
    """Answers as ``probability`` says; a call can be held (``gate``) or made to fail."""

    def __init__(self, versions: tuple[str, ...] = ("1", "2")) -> None:
        self.versions = list(versions)
        self.gate: asyncio.Event | None = None
        self.failure: Exception | None = None
        self.calls: list[tuple[str, str, int]] = []  # model, version, rows

    async def ready_versions(self, model: str) -> list[str]:
        return self.versions

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...], version: str = ""
    ) -> tuple[dict[str, np.ndarray], str]:
        self.calls.append((model, version, len(inputs["amount"])))
        if self.gate is not None:
            await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        ran = version or self.versions[-1]
        return answer(ran, inputs), ran


class Collected:
    """The payload log's place: what the runner hands on."""

    def __init__(self) -> None:
        self.seen: list[Observation] = []

    def observe(self, observation: Observation) -> None:
        self.seen.append(observation)


def observation(spec: ModelSpec, amounts: np.ndarray, request_rows: tuple[int, ...] = ()) -> Observation:
    n = len(amounts)
    inputs = {
        "amount": amounts.astype(np.float32).reshape(n, 1),
        "channel": np.array([b"web"] * n, dtype=object).reshape(n, 1),
        "visits": np.zeros((n, 1), dtype=np.int64),
    }
    scored = predictions(spec, answer("1", inputs), [False] * n)
    ids = [f"r{i}-0" for i in range(n)]
    return Observation(
        spec,
        "1",
        inputs,
        scored,
        [{"customer_id": str(i)} for i in range(n)],
        time.time(),
        request_rows,
        {},
        ids,
    )


def runner(
    triton: StandInTriton, target: ShadowTarget, *, in_flight: int = 8, resolve: Any = None
) -> tuple[ShadowRunner, Collected]:
    collected = Collected()

    async def no_other_model(name: str) -> ModelSpec:
        raise AssertionError("no other model is resolved here")

    store = SqliteEvidence(Path(tempfile.mkdtemp()) / "evidence.sqlite", 3600, 50_000)
    shadow = ShadowRunner(
        {"m": target},
        in_flight,
        triton,  # type: ignore[arg-type]
        resolve or no_other_model,
        Watchers(log=collected),
        EvidenceWriter(store),
    )
    return shadow, collected


async def read_report(shadow: ShadowRunner, spec: ModelSpec) -> dict[str, Any]:
    """The report as any replica reads it: once the writer has sent this one's counts."""
    await shadow.writer.flush()
    return await shadow.report(spec, "5m")


async def settle(shadow: ShadowRunner) -> None:
    while shadow._tasks:
        await asyncio.sleep(0.001)


def own_psi(a: np.ndarray, b: np.ndarray) -> float:
    """PSI of b's shares against a's, over ten equal bins of [0, 1] and an empty null bin."""
    edges = np.linspace(0, 1, 11)
    p = np.histogram(a, edges)[0] / len(a)
    q = np.histogram(b, edges)[0] / len(b)
    p, q = np.maximum(p, 1e-4), np.maximum(q, 1e-4)
    return float(np.sum((q - p) * np.log(q / p)))


def test_agreement_difference_and_psi_equal_the_tests_own_figures() -> None:
    spec = binary_spec()
    amounts = np.random.default_rng(3).uniform(0, 100, 400)

    async def run() -> dict[str, Any]:
        shadow, collected = runner(StandInTriton(), ShadowTarget(tolerance=0.1), in_flight=100)
        for chunk in np.array_split(amounts, 25):
            shadow.observe(observation(spec, chunk))
        await settle(shadow)
        assert len(collected.seen) == 25
        return await read_report(shadow, spec)

    report = asyncio.run(run())
    p1 = probability("1", amounts.astype(np.float32).astype(np.float64)).astype(np.float32).astype(np.float64)
    p2 = probability("2", amounts.astype(np.float32).astype(np.float64)).astype(np.float32).astype(np.float64)
    diff = np.abs(p1 - p2)
    assert report["enabled"] is True
    assert report["champion"] == {"model": "m", "version": "1"}
    assert report["challenger"] == {"model": "m", "version": "2"}
    assert report["rows"] == 400 and report["mirrored_rows"] == 400
    assert report["dropped_rows"] == 0 and report["error_rows"] == 0 and report["error_rate"] == 0
    assert report["agreement"] == pytest.approx(np.mean((p1 >= 0.5) == (p2 >= 0.5)))
    assert report["difference"]["mean"] == pytest.approx(diff.mean(), rel=1e-9)
    assert report["difference"]["max"] == pytest.approx(diff.max())
    assert report["difference"]["beyond_tolerance"] == pytest.approx(np.mean(diff > 0.1))
    true_p99 = np.quantile(diff, 0.99, method="higher")
    assert true_p99 <= report["difference"]["p99"] <= true_p99 * 1.13  # a log bin's width
    assert report["score_psi"] == pytest.approx(own_psi(p1, p2), rel=1e-6)
    assert report["challenger_latency_ms"]["p50"] > 0


def test_a_saturated_challenger_drops_batches_and_counts_them() -> None:
    spec = binary_spec()

    async def run() -> tuple[dict[str, Any], Collected, StandInTriton, list[int]]:
        triton = StandInTriton()
        triton.gate = asyncio.Event()
        shadow, collected = runner(triton, ShadowTarget(), in_flight=2)
        for _ in range(5):
            shadow.observe(observation(spec, np.full(3, 60.0)))
        await asyncio.sleep(0.01)
        logged_while_held = [len(collected.seen)]
        triton.gate.set()
        await settle(shadow)
        return await read_report(shadow, spec), collected, triton, logged_while_held

    report, collected, triton, held = asyncio.run(run())
    assert len(triton.calls) == 2  # the third batch found both calls busy, and the rest too
    assert report["dropped_rows"] == 9 and report["rows"] == 6 and report["mirrored_rows"] == 6
    # the dropped batches reached the payload log at once, without a challenger answer
    assert held == [3]
    answered = [o for o in collected.seen if any(p is not None for p in o.challenger.predictions)]
    assert len(collected.seen) == 5 and len(answered) == 2


def test_a_failing_challenger_is_counted_with_its_reason_and_raises_nowhere() -> None:
    spec = binary_spec()

    async def run() -> tuple[dict[str, Any], Collected]:
        triton = StandInTriton()
        triton.failure = Unavailable("Triton is unreachable (inference on 'm')", cause="triton_unavailable")
        shadow, collected = runner(triton, ShadowTarget())
        shadow.observe(observation(spec, np.full(4, 10.0)))
        await settle(shadow)
        return await read_report(shadow, spec), collected

    report, collected = asyncio.run(run())
    assert report["error_rows"] == 4 and report["rows"] == 0 and report["error_rate"] == 1
    assert "unreachable" in report["last_error"]
    assert report["agreement"] is None and report["difference"] is None
    (logged,) = collected.seen
    assert logged.challenger is not None and logged.challenger.predictions == [None] * 4


def test_a_challenger_that_goes_away_and_comes_back_keeps_the_whole_window() -> None:
    """Unloaded from Triton for a while, then loaded again: the rows compared before, the failed
    ones during and the compared ones after are all in the window, under the same pair (the
    challenger is never reported as the champion itself, nor as version "")."""
    spec = binary_spec()

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        triton = StandInTriton()
        shadow, _ = runner(triton, ShadowTarget())
        for _ in range(5):
            shadow.observe(observation(spec, np.full(4, 60.0)))  # 20 compared
        await settle(shadow)
        triton.versions = ["1"]  # the challenger is unloaded
        triton.failure = ModelNotFound("Triton has no version 2 of 'm'")
        for _ in range(3):
            shadow.observe(observation(spec, np.full(4, 60.0)))  # 12 failed
            await settle(shadow)
        during = await read_report(shadow, spec)
        triton.versions, triton.failure = ["1", "2"], None  # loaded again
        shadow._plans.clear()  # as the plan's TTL would, sooner
        for _ in range(2):
            shadow.observe(observation(spec, np.full(4, 60.0)))  # 8 compared
        await settle(shadow)
        return during, await read_report(shadow, spec)

    during, after = asyncio.run(run())
    assert (during["rows"], during["error_rows"]) == (20, 12)
    assert during["challenger"] == {"model": "m", "version": "2"}
    assert (after["rows"], after["error_rows"], after["mirrored_rows"]) == (28, 12, 40)
    assert after["challenger"] == {"model": "m", "version": "2"}
    assert after["error_rate"] == 12 / 40


def test_a_challenger_that_cannot_be_compared_says_why() -> None:
    spec = binary_spec()

    async def alone() -> dict[str, Any]:
        shadow, _ = runner(StandInTriton(versions=("1",)), ShadowTarget())
        shadow.observe(observation(spec, np.full(2, 10.0)))
        await settle(shadow)
        return await read_report(shadow, spec)

    report = asyncio.run(alone())
    assert report["error_rows"] == 2
    assert "serves only version 1" in report["last_error"] and "--keep-serving" in report["last_error"]

    other_classes = binary_spec("other", **{"serving.classes": [1, 2]})

    async def resolve(name: str) -> ModelSpec:
        assert name == "other"
        return other_classes

    async def other() -> dict[str, Any]:
        shadow, _ = runner(StandInTriton(), ShadowTarget(model="other"), resolve=resolve)
        shadow.observe(observation(spec, np.full(2, 10.0)))
        await settle(shadow)
        return await read_report(shadow, spec)

    report = asyncio.run(other())
    assert report["error_rows"] == 2 and "has the classes" in report["last_error"]


def test_share_mirrors_about_that_share_of_requests_whole() -> None:
    spec = binary_spec()

    async def run() -> dict[str, Any]:
        shadow, _ = runner(StandInTriton(), ShadowTarget(share=0.25), in_flight=1000)
        for _ in range(100):  # batches of 10 requests of 2 rows each
            shadow.observe(observation(spec, np.full(20, 30.0), request_rows=(2,) * 10))
        await settle(shadow)
        return await read_report(shadow, spec)

    report = asyncio.run(run())
    requests = report["rows"] / 2
    assert report["rows"] % 2 == 0  # a request's rows go together
    sd = math.sqrt(1000 * 0.25 * 0.75)
    assert abs(requests - 250) < 4 * sd


def test_unshadowed_models_reach_the_payload_log_at_once_and_the_report_says_off() -> None:
    spec = binary_spec("n")

    async def run() -> tuple[dict[str, Any], Collected]:
        shadow, collected = runner(StandInTriton(), ShadowTarget())
        shadow.observe(observation(spec, np.full(2, 10.0)))
        assert not shadow._tasks
        return await shadow.report(spec, "1h"), collected

    report, collected = asyncio.run(run())
    assert report["enabled"] is False and "GATEWAY_SHADOW" in report["reason"]
    assert collected.seen[0].challenger is None


def test_the_payload_log_row_carries_the_challengers_answer_beside_the_champions() -> None:
    spec = binary_spec()

    async def run() -> Collected:
        shadow, collected = runner(StandInTriton(), ShadowTarget(share=1.0))
        shadow.observe(observation(spec, np.array([10.0, 60.0])))
        await settle(shadow)
        return collected

    (seen,) = run_and_get(run).seen
    table = to_table(seen, np.arange(2), {}, None).to_pylist()
    p1, p2 = probability("1", np.array([10.0, 60.0])), probability("2", np.array([10.0, 60.0]))
    assert [r["__prediction_id"] for r in table] == ["r0-0", "r1-0"]
    assert [r["__request_id"] for r in table] == ["r0", "r1"]
    assert [r["__challenger_version"] for r in table] == ["2", "2"]
    assert [r["__challenger_score"] for r in table] == pytest.approx(p2, abs=1e-6)
    assert [r["__score"] for r in table] == pytest.approx(p1, abs=1e-6)
    assert [r["__challenger_label"] for r in table] == [0, 1]


def run_and_get(coro: Any) -> Any:
    return asyncio.run(coro())


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("nope", "GATEWAY_SHADOW is not valid JSON"),
        ('{"m": {"share": 2}}', "setting shadow.m.share"),
        ('{"m": {"version": "latest"}}', "setting shadow.m.version"),
        ('{"m": {"shar": 1}}', "setting shadow.m.shar"),
    ],
)
def test_a_bad_shadow_setting_is_one_line_and_exit_2(value: str, fragment: str) -> None:
    from typer.testing import CliRunner

    from gateway.cli import app

    result = CliRunner().invoke(app, ["serve"], env={"GATEWAY_SHADOW": value})
    assert result.exit_code == 2
    assert fragment in result.output and "Traceback" not in result.output


# -- the comparison, kind by kind (gateway/shadow/compare.py) ------------------------------


def test_each_kind_is_compared_on_what_it_answers() -> None:
    from gateway.responses import Prediction
    from gateway.shadow.compare import compare, psi_bins
    from tests.gateway.core.helpers import multi_config, outlier_config, spec_of, svc_config

    # multi-target regression: the largest difference over the targets, no label
    spec = spec_of(multi_config())
    a = [Prediction(False, values=(1.0, 2.0, 3.0)), Prediction(False, values=(0.0, 0.0, 0.0))]
    b = [Prediction(False, values=(1.5, 2.0, 2.0)), Prediction(False, values=(0.0, 0.25, 0.0))]
    got = compare(spec, a, b, psi_bins(spec))
    assert got.agree is None and got.difference is not None
    assert got.difference.tolist() == [1.0, 0.25]
    assert got.champion_bins is None  # K targets have no one distribution to compare

    # outlier detector: labels agree or not, the decision function's difference
    spec = spec_of(outlier_config())
    a = [
        Prediction(False, score=0.3, label=1, outlier=False),
        Prediction(False, score=-0.1, label=-1, outlier=True),
    ]
    b = [
        Prediction(False, score=0.1, label=1, outlier=False),
        Prediction(False, score=0.2, label=1, outlier=False),
    ]
    got = compare(spec, a, b, None)
    assert got.agree is not None and got.agree.tolist() == [True, False]
    assert got.difference is not None and got.difference.tolist() == pytest.approx([0.2, 0.3])

    # a classifier without probabilities: labels only
    spec = spec_of(svc_config())
    a = [Prediction(False, label=0, scores=(-1.0,)), Prediction(False, label=1, scores=(2.0,))]
    b = [Prediction(False, label=1, scores=(0.5,)), Prediction(False, label=1, scores=(1.0,))]
    got = compare(spec, a, b, psi_bins(spec))
    assert got.agree is not None and got.agree.tolist() == [False, True] and got.difference is None

    # multi-class with probabilities: the largest per-class difference; string classes
    multi = {
        "serving.kind": "multiclass",
        "serving.classes": ["a", "b", "c"],
        "serving.outputs": {"label": "label", "probabilities": "probabilities"},
    }
    spec = spec_from_config("m", "m", "1", config(multi, {"label": ["1"], "probabilities": ["3"]}), KEYS)
    a = [Prediction(False, label="a", probabilities=(0.6, 0.3, 0.1))]
    b = [Prediction(False, label="b", probabilities=(0.4, 0.5, 0.1))]
    got = compare(spec, a, b, None)
    assert got.agree is not None and got.agree.tolist() == [False]
    assert got.difference is not None and got.difference.tolist() == pytest.approx([0.2])
