"""``builder export MODEL_URI --repo DIR``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from builder.cli.common import console, emit_json, print_warnings, run_json_aware
from builder.cli.main import app
from builder.parity.compare import DEFAULT_ATOL, DEFAULT_RTOL
from builder.repository.triton_config import ServingOptions, VersionPolicy


@app.command("export")
def export(
    model_uri: Annotated[
        str, typer.Argument(help="models:/NAME@ALIAS, models:/NAME/VERSION or runs:/RUN_ID/PATH")
    ],
    repo: Annotated[Path, typer.Option(help="Triton model repository to write into")],
    name: Annotated[str | None, typer.Option(help="Triton model name (default: the registry name)")] = None,
    max_batch_size: Annotated[int, typer.Option(help="Largest batch Triton forms; 0 disables batching")] = 64,
    max_queue_delay_us: Annotated[
        int, typer.Option(help="How long the batcher waits to fill a batch (0: never, as Triton)")
    ] = 0,
    preferred_batch_size: Annotated[
        list[int] | None, typer.Option(help="Batch sizes to prefer (repeat)")
    ] = None,
    dynamic_batching: Annotated[bool, typer.Option(help="Enable Triton's dynamic batcher")] = True,
    max_queue_size: Annotated[
        int, typer.Option(help="Reject requests beyond this queue length (0: no limit)")
    ] = 0,
    queue_timeout_us: Annotated[
        int, typer.Option(help="Reject requests queued longer than this (0: never)")
    ] = 0,
    instances: Annotated[int, typer.Option(help="Model instances (on GPU where there is one, else CPU)")] = 1,
    version_policy: Annotated[str, typer.Option(help="latest:N, all or specific:1,3")] = "latest:1",
    warmup: Annotated[bool, typer.Option(help="Warm the model up with the input example at load")] = True,
    gpu_accelerator: Annotated[
        str, typer.Option(help="none, or tensorrt: ONNX Runtime's TensorRT EP on GPU servers")
    ] = "none",
    trt_precision: Annotated[str, typer.Option(help="FP16 or FP32, for --gpu-accelerator tensorrt")] = "FP16",
    ensemble: Annotated[
        bool, typer.Option(help="Also write NAME_ensemble: preprocess -> model -> postprocess")
    ] = False,
    ensemble_mode: Annotated[
        str,
        typer.Option(
            help="With --ensemble: steps (ONNX pre/postprocess models + a Triton ensemble) "
            "or fused (one ONNX graph, one model)"
        ),
    ] = "steps",
    ensemble_spec: Annotated[
        Path | None, typer.Option(help="Ensemble JSON spec (default: the run's serving/ensemble.json)")
    ] = None,
    reference: Annotated[
        Path | None,
        typer.Option(
            help="Drift reference rows, Parquet, one column per model input "
            "(default: the run's serving/reference.parquet)"
        ),
    ] = None,
    atol: Annotated[float, typer.Option(help="Parity: absolute tolerance")] = DEFAULT_ATOL,
    rtol: Annotated[float, typer.Option(help="Parity: relative tolerance")] = DEFAULT_RTOL,
    parity_rows: Annotated[
        int, typer.Option(help="Parity: rows generated from the signature, besides the input example")
    ] = 64,
    opset: Annotated[int, typer.Option(help="ONNX opset (tree models use at most 15)")] = 17,
    format: Annotated[
        list[str] | None,
        typer.Option(
            "--format", help="onnx (default); tensorrt (NAME is a TensorRT plan); all (NAME + NAME_trt)"
        ),
    ] = None,
    opt_batch_size: Annotated[
        int | None,
        typer.Option(
            help="TensorRT profile's opt batch (default: largest --preferred-batch-size, else max // 2)"
        ),
    ] = None,
    plan_precision: Annotated[
        str, typer.Option(help="TensorRT plan precision: fp32, tf32, fp16 or int8 (needs calibration rows)")
    ] = "fp16",
    int8_calibration: Annotated[
        Path | None,
        typer.Option(
            help="INT8 calibration rows: .npy (one input) or .npz by input (default: the input example)"
        ),
    ] = None,
    workspace_mb: Annotated[int, typer.Option(help="TensorRT builder workspace limit, MiB")] = 1024,
    timing_cache: Annotated[
        Path | None,
        typer.Option(
            help="TensorRT timing cache, reused across builds (default: ~/.cache/triton-stack/tensorrt/)"
        ),
    ] = None,
    plan_atol: Annotated[
        float | None,
        typer.Option(help="Plan parity vs ONNX Runtime: absolute tolerance (default: per precision)"),
    ] = None,
    plan_rtol: Annotated[
        float | None,
        typer.Option(help="Plan parity vs ONNX Runtime: relative tolerance (default: per precision)"),
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing version with different content")] = False,
    keep_serving: Annotated[
        bool,
        typer.Option(
            help="Load this version beside the one serving now (a challenger to shadow; "
            "same serving contract); a later plain export promotes it"
        ),
    ] = False,
    explain: Annotated[
        bool | None,
        typer.Option(
            "--explain/--no-explain",
            help="Also write NAME_explain: exact SHAP values per input column (docs/explain.md); "
            "default: the run's tag builder.explain",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout")] = False,
) -> None:
    """Export a registry model to ONNX, check parity, and write it into a Triton model repository."""

    def go() -> None:
        _check_files(reference, ensemble_spec, int8_calibration)
        # After the file checks: a missing file is refused before MLflow's second of imports.
        from builder.export import ExportRequest, export_model
        from builder.tensorrt.options import PlanOptions

        # "all" is the CLI's word for both; ExportRequest checks the rest (and the other options).
        given = format or ["onnx"]
        formats = tuple(dict.fromkeys(["onnx", "tensorrt", *given] if "all" in given else given))
        formats = tuple(f for f in formats if f != "all")
        request = ExportRequest(
            model_uri=model_uri,
            repo=repo,
            name=name,
            serving=ServingOptions(
                max_batch_size=max_batch_size,
                max_queue_delay_us=max_queue_delay_us,
                preferred_batch_sizes=tuple(preferred_batch_size or ()),
                dynamic_batching=dynamic_batching,
                max_queue_size=max_queue_size,
                queue_timeout_us=queue_timeout_us,
                instances=instances,
                version_policy=VersionPolicy.parse(version_policy),
                warmup=warmup,
                gpu_accelerator=gpu_accelerator,
                trt_precision=trt_precision,
            ),
            atol=atol,
            rtol=rtol,
            parity_rows=parity_rows,
            opset=opset,
            ensemble=ensemble,
            ensemble_mode=ensemble_mode,
            ensemble_spec=ensemble_spec,
            reference=reference,
            force=force,
            keep_serving=keep_serving,
            explain=explain,
            formats=formats,
            tensorrt=PlanOptions(
                precision=plan_precision,
                opt_batch_size=opt_batch_size,
                workspace_mb=workspace_mb,
                timing_cache=timing_cache,
                int8_calibration=int8_calibration,
                atol=plan_atol,
                rtol=plan_rtol,
            ),
        )
        if json_output:
            result = export_model(request)
            print_warnings(result.warnings)  # stderr: stdout stays one JSON object
            emit_json({"ok": True, **result.to_dict()})
            return
        with console.status("exporting") as status:
            result = export_model(request, progress=lambda step: status.update(f"{step} …"))
        for step in result.steps:
            console.print(f"[green]✓[/] {step.name}: {step.detail} [dim]({step.seconds:.2f}s)[/]")
        print_warnings(result.warnings)
        table = Table(title=f"{result.name} version {result.version} → {repo}")
        for col in ("model", "version", "status", "files"):
            table.add_column(col)
        for w in result.written:
            table.add_row(w.name, str(w.version), w.status, ", ".join(w.files) or "(ensemble)")
        console.print(table)

    run_json_aware(json_output, go)


def _check_files(reference: Path | None, ensemble_spec: Path | None, int8_calibration: Path | None) -> None:
    """Refuse a missing or unreadable input file at once, before the export loads the model."""
    from builder.errors import UsageError, first_line

    given = {
        "--reference": reference,
        "--ensemble-spec": ensemble_spec,
        "--int8-calibration": int8_calibration,
    }
    default = {
        "--reference": "a Parquet file, one column per model input, or leave it out to use the run's "
        "serving/reference.parquet",
        "--ensemble-spec": "the ensemble JSON spec, or leave it out to use the run's serving/ensemble.json",
        "--int8-calibration": "an .npy file (one input) or an .npz by input name",
    }
    for flag, path in given.items():
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path} does not exist (or is not a file)", hint=f"pass {default[flag]}")
    if reference is not None:
        import pyarrow.parquet as pq

        try:
            pq.read_schema(reference)
        except Exception as exc:  # pyarrow's errors for a file that is not Parquet, or is truncated
            reason = first_line(exc, 200)
            raise UsageError(
                f"--reference {reference} is not a readable Parquet file: {reason}",
                hint=f"pass {default['--reference']}",
            ) from None
