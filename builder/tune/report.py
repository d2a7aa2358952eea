"""What a tune leaves behind: the table, the plot, the report JSON, the winner's config and
the measurements in the latest version's ``metadata.json``. Every file is replaced atomically
(temp file in the same folder, fsync, ``os.replace``), so a reader never sees half of one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from builder.repository.triton_config import ModelConfig, parse_pbtxt, to_pbtxt

# The repository's own atomic writer: one implementation of "replace a file safely".
from builder.repository.write import METADATA_FILE, atomic_write, model_versions, read_metadata
from builder.tune.search import CandidateResult
from builder.tune.space import Knobs, apply

PLOT_FILE = "tune.png"
REPORT_FILE = "tune.json"


def results_table(
    results: Sequence[CandidateResult], winner: CandidateResult | None, budget_ms: float
) -> Table:
    """Every candidate, one row per concurrency level."""
    title = (
        f"candidates: p99 budget {budget_ms:g} ms; delay in µs, latency in ms, "
        "server queue/compute in µs per request; c = concurrency; * = winner"
    )
    # A light box without outer edges: ten columns fit 80 characters with room for the numbers.
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    # Short headers and paired cells, so an 80-column terminal or CI log shows it unwrapped.
    for col in ("#", "mbs", "delay", "inst", "pref", "c", "infer/s", "p50/p99", "q/c", "ok"):
        table.add_column(col, justify="left" if col in ("pref", "ok") else "right", no_wrap=True)
    for r in results:
        k = r.knobs
        knob_cells = [
            f"{r.index}{'*' if winner is not None and r.index == winner.index else ''}",
            str(k.max_batch_size),
            str(k.max_queue_delay_us),
            str(k.instances),
            ",".join(map(str, k.preferred_batch_sizes)) or "-",
        ]
        if r.error is not None:
            # The reason goes under the table (the CLI prints it): it is too long for a cell.
            table.add_row(*knob_cells, "-", "-", "-", "-", "[red]err[/]")
            continue
        for i, m in enumerate(r.measurements):
            table.add_row(
                *(knob_cells if i == 0 else [""] * len(knob_cells)),
                str(m.concurrency),
                f"{m.throughput:,.0f}",
                f"{m.p50_ms:.2f}/{m.p99_ms:.2f}",
                f"{m.queue_us:.0f}/{m.compute_us:.0f}",
                "[green]yes[/]" if m.p99_ms <= budget_ms else "[red]no[/]",
            )
    return table


def write_plot(path: Path, results: Sequence[CandidateResult], budget_ms: float, title: str) -> None:
    """Throughput vs p99, one line per candidate through its concurrency levels."""
    import io

    # The object API, not pyplot: no global figure state and no GUI backend in a CLI process.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=100)
    ax = fig.subplots()
    for r in results:
        if r.error is not None or not r.measurements:
            continue
        xs = [m.p99_ms for m in r.measurements]
        ys = [m.throughput for m in r.measurements]
        ax.plot(xs, ys, marker="o", label=f"#{r.index} {r.knobs.label()}")
        for m in r.measurements:
            ax.annotate(f"c{m.concurrency}", (m.p99_ms, m.throughput), fontsize=7)
    ax.axvline(budget_ms, color="red", linestyle="--", label=f"p99 budget {budget_ms:g} ms")
    ax.set_xlabel("p99 latency (ms)")
    ax.set_ylabel("throughput (infer/s)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    atomic_write(path, buffer.getvalue())


def report_data(
    model: str,
    budget_ms: float,
    concurrency: Sequence[int],
    results: Sequence[CandidateResult],
    winner: CandidateResult | None,
    applied: bool,
    min_gain: float,
) -> dict[str, Any]:
    """The measurements as JSON values (``--json``, ``tune.json`` and metadata's ``tune``)."""
    from datetime import UTC, datetime

    return {
        "model": model,
        "tuned_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "latency_budget_ms": budget_ms,
        "concurrency": list(concurrency),
        "score": "sum of throughput over the concurrency levels whose p99 <= budget",
        "min_gain": min_gain,
        "candidates": [r.to_dict() for r in results],
        "winner": None if winner is None else winner.to_dict(),
        "export_flags": None if winner is None else winner.knobs.export_flags(),
        "applied": applied,
    }


def write_report(report_dir: Path, data: dict[str, Any]) -> Path:
    path = report_dir / REPORT_FILE
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())
    return path


def rewrite_config(config_path: Path, knobs: Knobs) -> ModelConfig:
    """Set the tuned fields of the config on disk to ``knobs``; every other field is kept as
    parsed (comments and field order are the protobuf's, as every builder-written config)."""
    current = parse_pbtxt(config_path.read_text())
    new = apply(current, knobs)
    atomic_write(config_path, to_pbtxt(new).encode())
    return new


def record_in_metadata(model_dir: Path, data: dict[str, Any]) -> Path | None:
    """Put ``data`` under ``tune`` in the latest version's metadata.json (None: no version)."""
    versions = model_versions(model_dir)
    if not versions:
        return None
    version_dir = model_dir / str(versions[-1])
    metadata = read_metadata(version_dir) or {}
    metadata["tune"] = data
    path = version_dir / METADATA_FILE
    atomic_write(path, (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode())
    return path
