"""Part (e) of ``make bench``: what does an ensemble cost? (issue 12)

The tests' ensemble model (``support.models.sklearn_for_ensemble``: GradientBoosting, 20 trees of
depth 3, trained on imputed + standard-scaled features; the run logs ``serving/ensemble.json``
and ``decision_threshold``) is registered once and exported into one repository three ways:

- **bare** ``ens``: the model alone, fed rows already preprocessed (``transforms.preprocess``);
- **steps** ``ens_ensemble``: the Triton ensemble ``ens_preprocess`` -> ``ens`` ->
  ``ens_postprocess`` (``ensemble_mode="steps"``; only the model step has a queue delay);
- **fused** ``ensf_ensemble``: one merged ONNX graph (``ensemble_mode="fused"``).

Before timing, all three must give the same probabilities on the same raw rows (the bare model
gets them preprocessed by the numpy reference), the bare model must match sklearn, and the
ensembles' ``score``/``label`` must match the reference postprocess. Then at each concurrency
the three paths are measured by ``builder/tune/load.py``'s closed-loop gRPC client, alternated
A B C C B A, and each ensemble is compared with the bare model: p50 at concurrency 1 (goals:
steps <= 1.5x, fused <= 1.15x) and throughput at 16 and 64 (goal >= 0.8x).
"""

from __future__ import annotations

import argparse
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import report
from builder.tune import load

MODEL, FUSED = "ens", "ensf"
PATHS = {"bare": MODEL, "steps": f"{MODEL}_ensemble", "fused": f"{FUSED}_ensemble"}
STEPS = {"preprocess": f"{MODEL}_preprocess", "model": MODEL, "postprocess": f"{MODEL}_postprocess"}
# Issue 12's goals, ensemble against the bare model on the same machine in the same run.
GOALS = {
    "p50_ratio_max": {"concurrency": 1, "steps": 1.5, "fused": 1.15},
    "throughput_ratio_min": {"concurrency": (16, 64), "steps": 0.8, "fused": 0.8},
}
PROB_ATOL = 1e-6  # ensembles vs bare: the same ONNX model on the same features


class EnsembleBenchError(Exception):
    """A reason not to time the ensembles, e.g. one that answers unlike the bare model."""


def export_all(repo: Path) -> dict[str, Any]:
    """One registered version, three served shapes; the builder's default serving options."""
    from builder.export import ExportRequest, export_model

    uri = f"models:/{MODEL}@champion"
    written = {}
    for name, mode in ((MODEL, "steps"), (FUSED, "fused")):
        result = export_model(ExportRequest(uri, repo, name=name, ensemble=True, ensemble_mode=mode))
        written[mode] = [w.name for w in result.written]
    return written


def _infer(client: Any, model: str, x: Any, outputs: Sequence[str]) -> dict[str, Any]:
    import tritonclient.grpc as grpcclient

    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    requested = [grpcclient.InferRequestedOutput(o) for o in outputs]
    result = client.infer(model, [inp], outputs=requested, client_timeout=10)
    return {o: result.as_numpy(o) for o in outputs}


def check_answers(url: str, registered: Any) -> dict[str, float]:
    """All three paths agree on the same raw rows; returns the largest differences seen."""
    import numpy as np
    import pandas as pd
    import tritonclient.grpc as grpcclient

    from builder.ensemble_models import transforms

    spec = registered.extra["spec"]
    raw = registered.X.iloc[:64].to_numpy(dtype=np.float32).copy()
    raw[0] = np.nan  # an all-missing row: every column imputed
    features = transforms.preprocess(raw, spec["preprocess"])
    post = {**spec["postprocess"], "threshold": registered.extra["threshold"]}
    want = registered.native.predict_proba(
        pd.DataFrame(features.astype(np.float64), columns=registered.X.columns)
    )
    client = grpcclient.InferenceServerClient(url)
    try:
        bare = _infer(client, PATHS["bare"], features, ["probabilities"])["probabilities"]
        errors = {"bare_vs_sklearn": float(np.abs(bare - want).max())}
        if not errors["bare_vs_sklearn"] <= 1e-5:  # also catches NaN
            raise EnsembleBenchError(
                f"{MODEL} disagrees with sklearn: max abs error {errors['bare_vs_sklearn']:.2g}"
            )
        score, label = transforms.postprocess(bare, post)
        for path in ("steps", "fused"):
            got = _infer(client, PATHS[path], raw, ["probabilities", "score", "label"])
            error = float(np.abs(got["probabilities"] - bare).max())
            errors[f"{path}_vs_bare"] = error
            if not error <= PROB_ATOL:
                raise EnsembleBenchError(
                    f"{PATHS[path]} on raw rows disagrees with {MODEL} on preprocessed rows: "
                    f"max abs error {error:.2g} in probabilities"
                )
            if not (np.array_equal(got["score"], score) and np.array_equal(got["label"], label)):
                raise EnsembleBenchError(f"{PATHS[path]}'s score/label differ from the reference postprocess")
    finally:
        client.close()
    return errors


def _step_point(segments: Sequence[load.Segment], step_model: str) -> dict[str, float]:
    """One step's Triton counters over a point's windows, per request of that step."""
    stats = [s.step_stats[step_model] for s in segments]
    inferences, executions, queue_ns, compute_ns, successes = (sum(v) for v in zip(*stats, strict=True))
    successes = successes or 1
    return {
        "queue_ms": queue_ns / successes / 1e6,
        "compute_ms": compute_ns / successes / 1e6,
        "mean_batch_size": inferences / executions if executions else 0.0,
    }


def point(path: str, segments: Sequence[load.Segment]) -> dict[str, Any]:
    """One (path, concurrency) point; for steps, the queue/compute split of every step."""
    p = {"path": path, **report.triton_point(segments, batching=True)}
    if path == "steps":
        steps = {step: _step_point(segments, model) for step, model in STEPS.items()}
        p["steps"] = steps
        # The ensemble's own counters, kept as reported; the split below is the steps' own.
        p["ensemble_reported_queue_ms"] = p["server_queue_ms"]
        p["ensemble_reported_compute_ms"] = p["server_compute_ms"]
        p["server_queue_ms"] = sum(s["queue_ms"] for s in steps.values())
        p["server_compute_ms"] = sum(s["compute_ms"] for s in steps.values())
        p["mean_batch_size"] = steps["model"]["mean_batch_size"]
    return p


def measure(
    url: str, server_pgid: int, rows: dict[str, Any], args: argparse.Namespace, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Every (path, concurrency) point, the three paths alternated A B C C B A per concurrency."""
    window = args.duration / args.rounds
    order = list(PATHS)
    segments: dict[tuple[str, int], list[load.Segment]] = {}
    context = multiprocessing.get_context("spawn")  # the client inherits nothing from MLflow
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as client_process:
        for concurrency in args.concurrency:
            for r in range(args.rounds):
                for path in order if r % 2 == 0 else order[::-1]:
                    say(f"ensemble: {PATHS[path]} at concurrency {concurrency}, window {r + 1}/{args.rounds}")
                    stats_models = tuple(STEPS.values()) if path == "steps" else ()
                    job = client_process.submit(
                        load.measure,
                        url,
                        PATHS[path],
                        load.float_rows(rows[path]),
                        load.Plan(concurrency, args.warmup, window),
                        server_pgid=server_pgid,
                        stats_models=stats_models,
                    )
                    segments.setdefault((path, concurrency), []).append(job.result())
    return [point(path, segments[(path, c)]) for c in args.concurrency for path in order]


def _verdict(met: bool, measured: str, signs: str, goal: float) -> str:
    return f"{'met' if met else 'missed'}: {measured} {signs[0] if met else signs[1]} {goal:g}×"


def compare(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each ensemble against the bare model at the same concurrency, judged where a goal applies."""
    bare = {p["concurrency"]: p for p in points if p["path"] == "bare"}
    rows = []
    for p in points:
        if p["path"] == "bare":
            continue
        b, c = bare[p["concurrency"]], p["concurrency"]
        row = {
            "path": p["path"],
            "concurrency": c,
            "p50_ratio": p["p50_ms"] / b["p50_ms"],
            "p99_ratio": p["p99_ms"] / b["p99_ms"],
            "throughput_ratio": p["throughput_per_s"] / b["throughput_per_s"],
        }
        lat, thr = GOALS["p50_ratio_max"], GOALS["throughput_ratio_min"]
        if c == lat["concurrency"]:
            goal = lat[p["path"]]
            row["aim_met"] = row["p50_ratio"] <= goal
            row["aim"] = _verdict(row["aim_met"], f"p50 {row['p50_ratio']:.2f}×", "≤>", goal)
        elif c in thr["concurrency"]:
            goal = thr[p["path"]]
            row["aim_met"] = row["throughput_ratio"] >= goal
            row["aim"] = _verdict(row["aim_met"], f"infer/s {row['throughput_ratio']:.2f}×", "≥<", goal)
        rows.append(row)
    return rows


def notes(points: list[dict[str, Any]], cores: int) -> list[str]:
    busiest = max(points, key=lambda p: p["client_cores"] + p["server_cores"] + p["other_cores"])
    used = busiest["client_cores"] + busiest["server_cores"] + busiest["other_cores"]
    return [
        "Embedded Triton on CPU: every ONNX model (bare, each step, the fused graph) runs through the "
        "project's Python-backend onnxruntime shim, so each step of the steps ensemble is one more "
        "round trip to a stub process. On the NGC server the steps run on the native C++ onnxruntime "
        "backend, with less per-step overhead: read the steps/bare ratio here as an upper bound.",
        "Same rows on every path: the first 64 training rows (NaN in merchant_risk every 7th row); the "
        "bare model gets them preprocessed by builder/ensemble_models/transforms.py in the client "
        "(before timing), the ensembles get them raw. Each path returns all its outputs (bare: label, "
        "probabilities; ensembles: probabilities, score, label).",
        "queue / compute ms: Triton's statistics over the windows, per request; for steps the sum over "
        "its three steps (each step's own split in the table below), mean batch is the model step's.",
        f"Client and server share the machine's {cores} cores; the busiest point "
        f"({busiest['path']} at {busiest['concurrency']}) had {used:.1f} cores busy, "
        f"{busiest['other_cores']:.1f} of them other processes'.",
    ]


def run(args: argparse.Namespace, runtime: Any, root: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Everything in the module docstring; returns the ``ensemble`` part of the results."""
    import os

    from builder.ensemble_models import transforms
    from builder.repository.triton_config import ServingOptions
    from builder.runtime.server import ServerOptions, TritonServer
    from support import models

    root.mkdir(parents=True, exist_ok=True)
    say(f"ensemble: training and registering {MODEL}@champion")
    registered = models.sklearn_for_ensemble(MODEL)
    repo = root / "model_repo"
    say(f"ensemble: exporting {MODEL} (steps) and {FUSED} (fused)")
    written = export_all(repo)
    server = TritonServer(
        repo,
        ServerOptions.explicit(sorted(p.name for p in repo.iterdir() if p.is_dir())),
        runtime=runtime,
        log_path=root / "tritonserver.log",
    )
    say("ensemble: starting tritonserver")
    server.start(timeout=180)
    try:
        assert server.pid is not None
        errors = check_answers(server.grpc_url, registered)
        import numpy as np

        raw = registered.X.iloc[:64].to_numpy(dtype=np.float32)
        pre = transforms.preprocess(raw, registered.extra["spec"]["preprocess"])
        rows = {"bare": pre, "steps": raw, "fused": raw}
        points = measure(server.grpc_url, server.pid, rows, args, say)
        version = load.triton_version(server.grpc_url)
    finally:
        server.stop()
    defaults = ServingOptions()
    return {
        "triton_version": version,
        "settings": {
            "model": "GradientBoosting (20 trees, depth 3) on 5 FP32 features; pre: impute medians + "
            "standard-scale, post: positive-class score and label at threshold 0.3",
            "exports": written,
            "paths": PATHS,
            "serving": f"builder defaults: max_batch_size {defaults.max_batch_size}, "
            f"max_queue_delay_us {defaults.max_queue_delay_us} for the bare model, the model step and the "
            f"fused graph, 0 for the pre/postprocess steps, {defaults.instances} instance each",
            "duration_s": args.duration,
            "rounds": args.rounds,
            "warmup_s": args.warmup,
            "concurrency": args.concurrency,
            "goals": GOALS,
            "cores_usable": len(os.sched_getaffinity(0)),
        },
        "answers_max_abs_error": errors,
        "points": points,
        "comparison": compare(points),
        "notes": notes(points, len(os.sched_getaffinity(0))),
    }
