"""SLA files: the bundled ones load; every kind of bad file is one clear error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.errors import EXIT_BAD_SLA, SlaFileError
from loadtests.sla import BUNDLED_DIR, load_sla, resolve_sla_path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sla.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["demo", "strict"])
def test_bundled_sla_files_load_by_name(name: str) -> None:
    path = resolve_sla_path(name)
    assert path == BUNDLED_DIR / f"{name}.yaml"
    sla = load_sla(path)
    assert any(line.name == "Aggregated" for line in sla.endpoints)
    assert sla.description


def test_strict_is_stricter_than_demo_everywhere_both_set_a_limit() -> None:
    demo, strict = (load_sla(resolve_sla_path(n)) for n in ("demo", "strict"))
    loose = demo.endpoints[0].thresholds()
    tight = strict.endpoints[0].thresholds()
    for metric in loose.keys() & tight.keys():
        if metric == "min_rps":
            assert tight[metric] > loose[metric]
        else:
            assert tight[metric] < loose[metric]


GOOD_LINE = "  - name: Aggregated\n    p95_ms: 100\n"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        # unknown key (a typo of p95_ms): named with its endpoint
        (
            "endpoints:\n" + GOOD_LINE + "  - name: infer\n    p59_ms: 20\n",
            "endpoints[1] (infer).p59_ms: unknown key",
        ),
        # wrong type: a quoted number is not coerced
        ("endpoints:\n  - name: infer\n    p95_ms: '20'\n", "endpoints[0] (infer).p95_ms"),
        ("endpoints:\n  - name: infer\n    p95_ms: fast\n", "endpoints[0] (infer).p95_ms"),
        # negative and out-of-range thresholds
        (
            "endpoints:\n  - name: infer\n    p99_ms: -5\n",
            "endpoints[0] (infer).p99_ms: Input should be greater than 0",
        ),
        ("endpoints:\n  - name: infer\n    max_error_rate: 5\n", "endpoints[0] (infer).max_error_rate"),
        ("endpoints:\n  - name: infer\n    min_rps: -1\n", "endpoints[0] (infer).min_rps"),
        # a line that sets nothing, percentiles out of order, duplicates
        ("endpoints:\n  - name: infer\n", "endpoints[0] (infer): no threshold"),
        ("endpoints:\n  - name: infer\n    p50_ms: 50\n    p99_ms: 10\n", "p50_ms (50) is above p99_ms (10)"),
        ("endpoints:\n" + GOOD_LINE + GOOD_LINE, "'Aggregated' is listed twice"),
        # file-level problems
        ("endpoints: []\n", "endpoints: List should have at least 1 item"),
        ("endpoint:\n" + GOOD_LINE, "endpoint: unknown key"),
        ("- name: Aggregated\n", "must be a mapping"),
        ("endpoints:\n  - name: infer\n    p95_ms: [1\n", "not valid YAML at line"),
    ],
)
def test_bad_sla_file_is_a_clear_error_naming_the_field(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(SlaFileError) as info:
        load_sla(write(tmp_path, text))
    message = info.value.message + " " + " ".join(info.value.problems)
    assert named in message
    assert info.value.exit_code == EXIT_BAD_SLA
    assert "\n" not in info.value.message  # one line


def test_missing_sla_file_lists_the_bundled_names(tmp_path: Path) -> None:
    with pytest.raises(SlaFileError) as info:
        load_sla(resolve_sla_path(str(tmp_path / "nope.yaml")))
    assert "cannot read SLA file" in info.value.message
    assert info.value.hint and "demo" in info.value.hint and "strict" in info.value.hint


def test_every_problem_of_a_file_is_reported(tmp_path: Path) -> None:
    path = write(
        tmp_path, "endpoints:\n  - name: a\n    p95_ms: -1\n  - name: b\n    typo: 1\n    p50_ms: 1\n"
    )
    with pytest.raises(SlaFileError) as info:
        load_sla(path)
    assert len(info.value.problems) == 2
    assert "(and 1 more)" in info.value.message


def test_the_bundled_promotion_criteria_load_without_latency_lines() -> None:
    sla = load_sla(resolve_sla_path("promotion"))
    assert sla.endpoints == [] and sla.promotion is not None
    assert sla.promotion.model == "fraud-detector" and sla.promotion.window == "1h"
    assert sla.promotion.shadow is not None and sla.promotion.shadow.given() == {
        "min_rows": 1000.0,
        "min_agreement": 0.98,
        "max_error_rate": 0.01,
        "max_score_psi": 0.1,
        "max_p99_difference": 0.05,
    }
    assert sla.promotion.quality is not None
    assert sla.promotion.quality.min_labels == 200
    assert sla.promotion.quality.max_worse == {"auc": 0.01, "log_loss": 0.02}


def test_an_sla_file_may_hold_latency_lines_and_promotion_criteria(tmp_path: Path) -> None:
    sla = load_sla(write(tmp_path, "endpoints:\n" + GOOD_LINE + "promotion:\n  shadow: {min_rows: 10}\n"))
    assert len(sla.endpoints) == 1 and sla.promotion is not None
    assert sla.promotion.model is None and sla.promotion.window == "1h" and sla.promotion.quality is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("promotion:\n  shadow: {min_agrement: 0.9}\n", "promotion.shadow.min_agrement: unknown key"),
        ("promotion:\n  shadow: {min_agreement: 1.5}\n", "promotion.shadow.min_agreement"),
        ("promotion:\n  shadow: {min_rows: '1000'}\n", "promotion.shadow.min_rows"),
        ("promotion:\n  shadow: {max_error_rate: -0.1}\n", "promotion.shadow.max_error_rate"),
        ("promotion:\n  shadow: {}\n", "promotion.shadow: no criterion"),
        (
            "promotion:\n  quality: {max_worse: {f1: 0.01}}\n",
            "promotion.quality.max_worse: unknown metric 'f1'",
        ),
        ("promotion:\n  quality: {max_worse: {auc: -0.01}}\n", "auc: a margin cannot be negative"),
        ("promotion:\n  quality: {min_labels: 0}\n", "promotion.quality.min_labels"),
        ("promotion:\n  window: hourly\n  shadow: {min_rows: 1}\n", "window 'hourly' is not a duration"),
        ("promotion:\n  model: fraud\n", "promotion: no criteria"),
        ("description: nothing\n", "nothing to check"),
    ],
)
def test_bad_promotion_criteria_are_a_clear_error_naming_the_field(
    tmp_path: Path, text: str, named: str
) -> None:
    with pytest.raises(SlaFileError) as info:
        load_sla(write(tmp_path, text))
    message = info.value.message + " " + " ".join(info.value.problems)
    assert named in message
    assert "\n" not in info.value.message
