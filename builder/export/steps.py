"""The export's steps over one context (after Model Navigator's execution context).

``ExportContext`` (export/context.py) is built once per export and filled in as the steps run:
the registry model and its served inputs; with ``--ensemble``, the run's serving steps and the
ensemble plan (before any conversion, so that what the ensemble lacks is refused at once); the
native model and what it is, the parity rows, the ONNX graph and its one onnxruntime session,
the parity report, the drift reference, the artifacts, (the plan), (with ``--keep-serving``, the
configs that keep the serving version loaded), what was written. Each step reads what earlier
steps left and returns one status line; nothing is loaded or run twice.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from builder.convert import converter_for
from builder.convert.base import GRAPH_HINT, GraphError, normalize_outputs
from builder.ensemble.plan import plan_ensemble
from builder.ensemble.user_step_models import StepModel, step_model_name, step_options
from builder.ensemble.user_steps import UserStep, load_run_steps
from builder.errors import BuilderError, ConversionError, ParityError, UsageError, first_line
from builder.export.context import ExportContext
from builder.export.describe import model_artifacts, opset_of
from builder.export.drift_reference import Drift, Source, drift_for
from builder.export.keep_serving import keep_serving
from builder.kinds import ModelKind, with_targets
from builder.parity.compare import GraphSession, compare, require_pass
from builder.parity.rows import build_feeds, example_digest, example_tensors
from builder.registry.client import RegistryModel, fetch_model, tracking_uri
from builder.registry.signature import ModelInputs, inputs_from_signature
from builder.registry.uri import ModelURI
from builder.repository.names import validate_model_name
from builder.repository.write import write_models
from builder.tensors import check_model, graph_tensors

if TYPE_CHECKING:
    from builder.tensorrt.plan import Preflight

Timed = Callable[[str, Callable[[], Any], Callable[[Any], str]], Any]


class Step:
    """One export step: ``title`` is its status line's name (None: it reports its own parts)."""

    def title(self, ctx: ExportContext) -> str | None:
        raise NotImplementedError

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        raise NotImplementedError


class Resolve(Step):
    def title(self, ctx: ExportContext) -> str:
        return f"resolve {ctx.uri.raw} in {tracking_uri()}"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        model = fetch_model(ctx.uri, ctx.workdir)
        ctx.model = model
        ctx.converter = converter_for(model.flavor, output_names=_output_names(model))
        signed = inputs_from_signature(model.mlmodel.signature, model_ref=model.ref)
        ctx.inputs = ctx.converter.served_inputs(signed)
        return f"{model.ref} ({model.flavor}, run {model.run_id[:8]}), {_layout_line(ctx.inputs)}"


def _output_names(model: RegistryModel) -> list[str] | None:
    """The signature's output names (a PyTorch module's outputs are named after them)."""
    sig = model.mlmodel.signature
    if sig is None or sig.outputs is None:
        return None
    names = [getattr(s, "name", None) for s in sig.outputs.inputs]
    return [str(n) for n in names] if names and all(names) else None


def _layout_line(inputs: ModelInputs) -> str:
    if inputs.layout == "matrix":
        return f"one float matrix of {len(inputs.columns)} columns"
    if inputs.layout == "columns":
        kinds = ", ".join(f"{c.name}:{c.dtype}" for c in inputs.columns[:6])
        more = f", +{len(inputs.columns) - 6}" if len(inputs.columns) > 6 else ""
        return f"{len(inputs.columns)} typed column inputs ({kinds}{more})"
    return ", ".join(f"{t.name} {t.dtype}{list(t.shape)}" for t in inputs.tensors)


class ServingSteps(Step):
    """``--ensemble``: the run's own serving steps (``serving/steps/``), read and checked
    before any conversion work, so that a malformed step or a mode they cannot run in is
    refused at once."""

    def title(self, ctx: ExportContext) -> str:
        return "read the run's serving steps"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        ctx.serving_steps = tuple(load_run_steps(ctx.model.run_id, ctx.workdir))
        if not ctx.serving_steps:
            return "none (generated steps only)"
        names = ", ".join(f"{s.name} ({s.position})" for s in ctx.serving_steps)
        if ctx.request.ensemble_mode == "fused":
            python = any(s.model is None for s in ctx.serving_steps)
            raise UsageError(
                f"--ensemble-mode fused cannot fuse the run's serving step(s) {names}: "
                + (
                    "a Python-backend model is no ONNX graph"
                    if python
                    else "fused merges only the generated steps into the model's graph"
                ),
                hint="use --ensemble-mode steps: the generated steps stay ONNX, only the run's "
                "own steps run as models of their own",
            )
        return names


class StepModels(Step):
    """The run's registered-model serving steps (``"model": "models:/NAME@ALIAS"``): each exported
    through the normal path (resolve, load, parity rows, convert, parity, describe: its own
    conversion, parity and serving facts) as the ONNX model ``NAME_<step>``. ``resolve`` runs
    first, before any conversion work (a step naming no model is refused at once); the rest
    after the model's parity. Nothing is written here: the artifacts join the export's one
    write, at the export's version like every step, so that the ensemble config stays the one
    commit point (builder/repository/write.py)."""

    def __init__(self, parts: tuple[type[Step], ...]) -> None:
        self.parts = parts

    def title(self, ctx: ExportContext) -> None:
        return None

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        for step in ctx.serving_steps:
            if step.model is None:
                continue
            sub = ctx.step_exports.get(step.name) or _step_export(ctx, step, step.model)
            ctx.step_exports[step.name] = sub
            for part in self.parts:
                _run_for_step(step, sub, part(), timed)
            if sub.artifacts:
                ctx.warnings += [f"{step.label}: {w}" for w in sub.warnings]
                (artifact,) = sub.artifacts
                graph = sub.graph.graph
                inputs, outputs = graph_tensors(graph.input), graph_tensors(graph.output)
                ctx.step_models[step.name] = StepModel(artifact, tuple(inputs), tuple(outputs))
        return ", ".join(ctx.step_exports)


def _step_export(ctx: ExportContext, step: UserStep, uri: ModelURI) -> ExportContext:
    """The export context of a registered-model serving step: the main request's conversion
    settings, the serving step's options, no ensemble, no plan, no drift reference."""
    name = step_model_name(ctx.name, step)
    request = dataclasses.replace(
        ctx.request,
        model_uri=uri.raw,
        name=name,
        serving=step_options(step, ctx.request.serving),
        ensemble=False,
        ensemble_spec=None,
        ensemble_mode="steps",
        reference=None,
        formats=("onnx",),  # a plan (--format tensorrt) is the model's; a step stays ONNX
    )
    workdir = ctx.workdir / f"step-{step.name}"
    workdir.mkdir(parents=True, exist_ok=True)
    sub = ExportContext(request=request, uri=uri, name=name, workdir=workdir)
    # Drift is watched on the model the ensemble serves (docs/drift.md), not on its steps.
    sub.drift = Drift(None, "an ensemble step: the drift reference is the served model's")
    return sub


def _run_for_step(step: UserStep, sub: ExportContext, part: Step, timed: Timed) -> None:
    """One export step of a registered-model serving step, its status line and its refusal (exit
    code kept) naming the serving step."""
    try:
        timed(f"{step.label}: {part.title(sub)}", functools.partial(part.run, sub, timed), str)
    except BuilderError as exc:
        if type(exc).__init__ is not BuilderError.__init__:
            raise
        raise type(exc)(f"{step.label} ({sub.uri.raw}): {exc.message}", hint=exc.hint) from exc


class PlanEnsemble(Step):
    """``--ensemble``: what the ensemble will be (builder/ensemble/plan.py), decided from the
    served inputs and the run's serving steps before any conversion work: a spec the ensemble
    needs and the run lacks is refused here, not after conversion, parity and the drift
    reference."""

    def title(self, ctx: ExportContext) -> str:
        return "plan the ensemble"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        request = ctx.request
        ctx.ensemble = plan = plan_ensemble(
            ctx.model,
            ctx.inputs,
            request.ensemble_spec,
            request.ensemble_mode,
            ctx.serving_steps,
            ctx.workdir,
        )
        stages = "post-only stages" if plan.typed else "pre/postprocess stages"
        spec = f"spec {plan.spec.source}" if plan.spec is not None else "no spec: the serving steps alone"
        return f"{plan.mode}, {stages}, {spec}"


class Load(Step):
    def title(self, ctx: ExportContext) -> str:
        return "load native model"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        model = ctx.model
        try:
            ctx.native = ctx.converter.load(model.local_path)
        except ConversionError:
            raise
        except Exception as exc:  # a corrupted artifact surfaces as whatever its loader raises
            raise ConversionError(
                f"{model.ref}: the {model.flavor} model artifact cannot be loaded: "
                f"{type(exc).__name__}: {first_line(exc, 200)}",
                hint="the artifact may be corrupted or need a library version this environment lacks",
            ) from exc
        if ctx.inputs.layout == "matrix" and ctx.converter.reads_columns_by_name(ctx.native):
            _serve_by_column(ctx)
        ctx.kind = ctx.converter.describe(ctx.native, ctx.inputs)  # its refusals named in run.py
        try:
            raw = model.mlmodel.load_input_example(str(model.local_path))
        except Exception:  # an unreadable example is not fatal: parity falls back to generated rows
            raw = None
        ctx.example = example_tensors(raw, ctx.inputs)
        return f"{model.flavor}, {_kind_line(ctx.kind)}"


def _serve_by_column(ctx: ExportContext) -> None:
    """The model picks its columns by name (a ColumnTransformer naming them), which one matrix
    input cannot carry: serve it one typed input per column instead (layout ``columns``), and
    plan the ensemble (planned from the matrix before the model was loaded) again."""
    model = ctx.model
    signed = inputs_from_signature(model.mlmodel.signature, model_ref=model.ref, layout="columns")
    ctx.inputs = ctx.converter.served_inputs(signed)
    if ctx.ensemble is not None:
        PlanEnsemble().run(ctx, lambda *_: None)


def _kind_line(kind: ModelKind) -> str:
    if kind.is_classifier:
        shown = ", ".join(map(repr, (kind.classes or ())[:5]))
        more = ", ..." if len(kind.classes or ()) > 5 else ""
        return f"{kind.kind} classifier (classes {shown}{more})"
    if kind.kind == "regression":
        return "regressor"
    if kind.kind == "cluster":
        return f"clusterer ({kind.clusters if kind.clusters is not None else 'unknown number of'} clusters)"
    return "outlier detector" if kind.kind == "outlier" else "outputs passed through by name"


class ParityRows(Step):
    def title(self, ctx: ExportContext) -> str:
        return "build parity rows"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        inputs = ctx.inputs
        vocabulary = ctx.converter.vocabulary(ctx.native, inputs)
        known_only = ctx.converter.known_values_only(ctx.native, inputs)
        ctx.feeds = build_feeds(
            inputs, ctx.example, vocabulary, ctx.request.parity_rows, frozenset(known_only)
        )
        ctx.converter.check_generated(ctx.native, ctx.feeds, inputs)
        learned = sum(len(v) for v in vocabulary.values())
        note = f", strings from {learned} learned values" if inputs.has_strings else ""
        return f"{ctx.feeds.rows} rows ({ctx.feeds.source}{note}){_known_only_line(known_only)}"


def _known_only_line(known_only: dict[str, str]) -> str:
    """Which inputs got no unseen values, and why (``; no unseen values for country, channel:
    OrdinalEncoder(handle_unknown='error') refuses them``)."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in known_only.items():
        by_reason.setdefault(reason, []).append(name)
    return "".join(
        f"; no unseen values for {', '.join(names)}: {reason} refuses them"
        for reason, names in by_reason.items()
    )


class Convert(Step):
    def title(self, ctx: ExportContext) -> str:
        return "convert to ONNX"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        ref, converter = ctx.model.ref, ctx.converter
        what = f"{converter.library} made for {converter.model_name(ctx.native)}"
        try:
            converted = converter.to_onnx(ctx.native, ctx.inputs, ctx.request.opset)
        except BuilderError:
            raise
        except Exception as exc:  # the boundary: a converter's own bug is a refusal, not a traceback
            raise ConversionError(
                f"{ref}: {converter.library} failed converting {converter.model_name(ctx.native)}: "
                f"{type(exc).__name__}: {first_line(exc)}",
                hint="report it to the converter's project; nothing was written",
            ) from exc
        graph = check_model(converted, ref)
        expected = {t.name for t in ctx.inputs.tensors}
        actual = {t.name for t in graph_tensors(graph.graph.input)}
        if expected != actual:
            raise ConversionError(
                f"{ref}: ONNX inputs {sorted(actual)} do not match the signature's {sorted(expected)}",
                hint="log the model with a signature (or input example) naming the graph's inputs; "
                "nothing was written",
            )
        # Output shapes are re-declared from a run on real rows (the first parity rows). That
        # probe runs a graph that is not yet final, in a session of its own; the final graph
        # gets one session here, which parity, the drift reference and the plan step share.
        try:
            normalized = normalize_outputs(graph, ctx.feeds.head(3))
        except GraphError as exc:
            verb = {"load": "cannot load", "run": "cannot run"}.get(exc.stage, "cannot serve")
            known = converter.known_cause(ctx.native, "parity") if exc.stage == "run" else None
            raise ConversionError(
                f"{ref}: ONNX Runtime {verb} the graph {what}: {first_line(exc.cause)}",
                hint=known or exc.hint,
            ) from exc
        ctx.graph = check_model(normalized, ref)
        ctx.session = GraphSession(ctx.graph)
        # A regressor's number of targets is what its graph answers per row (checked against the
        # native model by parity next).
        ctx.kind = with_targets(ctx.kind, ctx.graph)
        return f"opset {opset_of(ctx.graph)}, {len(ctx.graph.graph.node)} nodes"


class Parity(Step):
    def title(self, ctx: ExportContext) -> str:
        return "check parity"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        feeds, ref = ctx.feeds, ctx.model.ref
        try:
            native = ctx.converter.predict(ctx.native, feeds.arrays, ctx.inputs)
        except Exception as exc:  # the native model refusing its own kind of input
            raise ParityError(
                f"{ref}: the native model failed on the parity rows: {type(exc).__name__}: "
                f"{first_line(exc, 200)}",
                hint="check the input example matches what the model was trained on",
            ) from exc
        try:
            converted = ctx.session.run(feeds.arrays)
        except Exception as exc:  # onnxruntime refusing the graph or the rows
            converter, first = ctx.converter, first_line(exc)
            raise ConversionError(
                f"{ref}: ONNX Runtime cannot run the graph {converter.library} made for "
                f"{converter.model_name(ctx.native)}: {first}",
                hint=converter.known_cause(ctx.native, "parity") or GRAPH_HINT,
            ) from exc
        report = compare(
            converted,
            native,
            rows=feeds.rows,
            source=feeds.source,
            atol=ctx.request.atol,
            rtol=ctx.request.rtol,
        )
        ctx.parity, ctx.onnx_outputs = report, converted
        try:
            require_pass(report, ref)
        except ParityError as exc:
            # A miss whose cause the model's parameters show: say what to change in it.
            known = ctx.converter.known_cause(ctx.native, "parity")
            if known is None:
                raise
            raise ParityError(exc.message, hint=known) from exc
        worst = max((o.max_abs_err for o in report.outputs), default=0.0)
        return f"pass: {report.rows} rows ({report.source}), max abs err {worst:.2g}"


class Reference(Step):
    """Reference statistics of the inputs and the prediction, for drift (docs/drift.md)."""

    def title(self, ctx: ExportContext) -> str:
        return "compute drift reference"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        source = Source(
            run_id=ctx.model.run_id,
            inputs=ctx.inputs,
            kind=ctx.kind,
            graph=ctx.session,
            reference_file=ctx.request.reference,
            workdir=ctx.workdir,
        )
        ctx.drift, warning = drift_for(source)
        if warning is not None:
            ctx.warnings.append(warning)
        ref = ctx.drift.reference
        if ref is None:
            return f"none ({ctx.drift.reason})"
        prediction = f" and the {ref['prediction']['name']}" if "prediction" in ref else ""
        return f"{ref['rows']} rows, {len(ref['features'])} columns{prediction} ({ref['source']})"


class Explain(Step):
    """``--explain`` (or the run's tag): the model's exact explainer, built and checked against
    shap on the parity rows before anything is written (builder/explain/)."""

    def title(self, ctx: ExportContext) -> str:
        return "build the explainer"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        from builder.explain.artifact import want_explainer

        if not want_explainer(ctx):
            return "not asked (--explain)"
        if (pre := _ensemble_pre_stage(ctx)) is not None:
            # The gateway sends the explainer what it sends the served model: the ensemble's raw
            # inputs, which this stage changes before the model sees them; the explainer's columns
            # would then not be the model's. Refused rather than explained on the wrong values.
            raise ConversionError(
                f"{ctx.model.ref}: --explain with an ensemble whose {pre} changes the model's inputs: "
                "the explainer would read the raw inputs as the model's",
                hint="export the explainer without --ensemble, or move the preprocessing into the "
                "logged Pipeline (its preprocessing is explained column by column)",
            )
        from builder.explain.build import build_explainer

        ctx.explainer = found = build_explainer(ctx)
        return (
            f"{found.method}, {found.units}, {len(found.columns)} columns x {len(found.outputs)} "
            f"output(s), max abs err vs shap {found.max_abs_err:.2g} on {found.rows} rows"
        )


def _ensemble_pre_stage(ctx: ExportContext) -> str | None:
    """What runs before the model in the planned ensemble, if anything: a generated preprocess
    stage (the spec's impute/mean/scale) or one of the run's own ``pre`` serving steps."""
    plan = ctx.ensemble
    if plan is None:
        return None
    if plan.spec is not None and plan.spec.preprocess and not plan.typed:
        return "generated preprocess stage"
    pre = next((step for step in plan.serving_steps if step.position == "pre"), None)
    return None if pre is None else str(pre)


class Describe(Step):
    def title(self, ctx: ExportContext) -> str:
        return "describe config and metadata"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        ctx.artifacts = model_artifacts(ctx)
        return ", ".join(a.name for a in ctx.artifacts)


class Plan(Step):
    """``--format tensorrt``: NAME becomes the plan; ``all``: NAME stays ONNX, NAME_trt is the plan."""

    def __init__(self, preflight: Preflight) -> None:
        self.preflight = preflight

    def title(self, ctx: ExportContext) -> None:
        return None

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        from builder.tensorrt.plan import PlanSource, plan_artifact

        if ctx.inputs.has_strings:
            raise UsageError(
                f"{ctx.model.ref} takes string inputs, which a TensorRT engine cannot",
                hint="export it with --format onnx",
            )
        onnx_artifact, rest = ctx.artifacts[0], ctx.artifacts[1:]
        both = "onnx" in ctx.request.formats
        source = PlanSource(
            model_ref=ctx.model.ref,
            artifact=onnx_artifact,
            graph=ctx.graph,
            feeds=ctx.feeds,
            onnx_outputs=ctx.onnx_outputs,  # parity's: the engine is compared with them
            example=ctx.example,
            serving=ctx.request.serving,
        )
        name = validate_model_name(f"{ctx.name}_trt") if both else ctx.name
        plan, ctx.plan_parity = plan_artifact(self.preflight, source, name, ctx.workdir / "tensorrt", timed)
        ctx.artifacts = [*([onnx_artifact] if both else []), plan, *rest]
        return plan.name


class KeepServing(Step):
    """``--keep-serving``: each artifact's config loads the champion (the version serving now)
    beside this one, records it and keeps its drift reference; refused, before the write, where
    the serving contracts differ (export/keep_serving.py)."""

    def title(self, ctx: ExportContext) -> str:
        return "keep the serving version beside this one"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        kept, champions = [], []
        for art in ctx.artifacts:
            art, champion = keep_serving(ctx.request.repo, ctx.version, art)
            kept.append(art)
            champions.append(f"{art.name} {champion} and {ctx.version}")
        ctx.artifacts = kept
        return ", ".join(champions)


class Write(Step):
    def title(self, ctx: ExportContext) -> str:
        return f"write {ctx.request.repo}"

    def run(self, ctx: ExportContext, timed: Timed) -> str:
        ctx.written = write_models(ctx.request.repo, ctx.version, ctx.artifacts, force=ctx.request.force)
        return ", ".join(f"{w.name}/{w.version} {w.status}" for w in ctx.written)


def pipeline(ctx: ExportContext) -> list[Step]:
    ensemble = ctx.request.ensemble
    steps: list[Step] = [Resolve()]
    if ensemble:  # everything the ensemble needs from the run, before any conversion work
        steps += [ServingSteps(), StepModels((Resolve,)), PlanEnsemble()]
    steps += [Load(), ParityRows(), Convert(), Parity(), Reference(), Explain()]
    steps += [*([StepModels((Load, ParityRows, Convert, Parity, Describe))] if ensemble else []), Describe()]
    if ctx.preflight is not None:
        steps.append(Plan(ctx.preflight))
    if ctx.request.keep_serving:
        steps.append(KeepServing())
    return [*steps, Write()]


__all__ = ["ExportContext", "Step", "example_digest", "pipeline"]
