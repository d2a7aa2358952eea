"""``builder score``'s steps: the served version, the feature service's offline views, the
entity table, the point-in-time join, the graph on the executors, the checks, the output.

Everything that can be refused without data (the repository, the version, the contract, the
feature service, an existing output) is refused before Spark reads a row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.errors import UsageError
from builder.score.answers import answer_plan
from builder.score.check import RowNames, gateway_problems, triton_problems
from builder.score.errors import ScoreInputError, SkewError
from builder.score.executor import DEFAULTS_USED, MISSING, ScoringPlan, with_answers
from builder.score.inputs import FEATURE_PREFIX, plan_inputs
from builder.score.output import refuse_existing, write_whole
from builder.score.served import ServedVersion, served_version
from builder.score.session import spark_session
from builder.score.table import prepare, read_entities
from feast_access import EVENT_TIMESTAMP
from feast_access.spark_join import point_in_time

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from feast_access.offline import OfflineView

# The output's own columns besides the entity table's and the predictions.
MODEL, VERSION, IDENTITY = "model", "version", "export_identity"
SHOWN_PROBLEMS = 20


@dataclass(frozen=True)
class ScoreRequest:
    entities: str  # a Parquet/CSV path or table:NAME
    repo: Path
    model: str
    feature_repo: Path
    output: str
    version: int | None = None
    timestamp: str = EVENT_TIMESTAMP
    master: str | None = None
    overwrite: bool = False
    check_triton: str | None = None
    check_gateway: str | None = None
    check_rows: int = 100


@dataclass
class ScoreResult:
    output: str
    model: str
    version: int
    export_identity: str
    rows: int = 0
    scored: int = 0
    defaults_used: int = 0
    checks: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"ok": True, **self.__dict__}


def offline_views(request: ScoreRequest, served: ServedVersion) -> list[OfflineView]:
    """The feature service's views, checked against the model's columns."""
    from feast_access.offline import OfflineError, views
    from feast_access.store import open_store

    if not (request.feature_repo / "feature_store.yaml").is_file():
        raise UsageError(
            f"{request.feature_repo} is not a Feast repository (no feature_store.yaml)",
            hint="pass --feature-repo, the repository whose registry holds the model's feature service",
        )
    try:
        found = views(open_store(request.feature_repo), served.feature_service)
    except OfflineError as exc:
        raise ScoreInputError(
            f"{served.label}: {exc}",
            hint="apply the feature repository (feast apply), or "
            "export the model from a run tagged with a service it has",
        ) from exc
    served_by = {f.name: f.kind for v in found for f in v.features}
    contract = served.contract
    for column in contract.input_columns or ():
        if column.name in contract.request_fields:
            continue
        kind = served_by.get(column.name)
        fits = {"float32": ("int64", "float64", "bool"), "string": ("string",)}.get(
            column.dtype, (column.dtype,)
        )
        if kind not in fits:
            said = f"serves it as {kind}" if kind else "does not serve it"
            raise ScoreInputError(
                f"{served.label} takes {column.name!r} ({column.dtype}); feature service "
                f"{served.feature_service!r} {said}",
                hint="the model and the feature service must be the ones it was trained with",
            )
    return found


def scoring_plan(spark: SparkSession, served: ServedVersion) -> ScoringPlan:
    contract = served.contract
    columns = tuple((c.name, c.dtype) for c in contract.input_columns or ())
    threads = int(spark.conf.get("spark.task.cpus", "1") or 1)
    return ScoringPlan(
        plan_inputs(contract.layout, columns, contract.request_fields),
        answer_plan(contract),
        served.onnx_sha256,
        threads,
    )


def _scored_frame(
    spark: SparkSession, request: ScoreRequest, served: ServedVersion, views: list[OfflineView]
) -> tuple[DataFrame, list[str]]:
    """The entity table joined and scored (features still in it), and its entity keys."""
    plan = scoring_plan(spark, served)
    keys = {k: kind for v in views for k, kind in zip(v.join_keys, v.key_kinds, strict=True)}
    fields = {c.name: c.dtype for c in plan.inputs.columns if not c.feature}
    reserved = [MODEL, VERSION, IDENTITY, *(n for n, _, _ in plan.answers.columns()), DEFAULTS_USED, MISSING]
    table = prepare(
        read_entities(spark, request.entities), request.entities, request.timestamp, keys, fields, reserved
    )
    joined = point_in_time(spark, table, views, request.timestamp, FEATURE_PREFIX)
    graph = spark.sparkContext.broadcast(served.onnx)
    return with_answers(joined, plan, graph), list(keys)


def score(request: ScoreRequest) -> ScoreResult:
    """Score the entity table (see the module docstring); the result's counts are the output's."""
    started = time.monotonic()
    if request.check_rows < 1:
        raise UsageError(f"--check-rows {request.check_rows} is not a positive number")
    served = served_version(request.repo, request.model, request.version)
    views = offline_views(request, served)  # refused before Spark starts
    spark = spark_session(request.master)
    target = refuse_existing(spark, request.output, request.overwrite)
    plan = scoring_plan(spark, served)
    scored, keys = _scored_frame(spark, request, served, views)
    checking = bool(request.check_triton or request.check_gateway)
    if checking:
        scored = scored.persist()  # the sample checked is the rows written, not a recomputation
    from pyspark.sql import functions as F

    prediction_names = [n for n, _, _ in plan.answers.columns()]
    table_columns = [
        c
        for c in scored.columns
        if not c.startswith(FEATURE_PREFIX) and c not in (*prediction_names, DEFAULTS_USED, MISSING)
    ]
    output = scored.select(
        *(F.col(f"`{c}`") for c in table_columns),
        F.lit(served.model).alias(MODEL),
        F.lit(served.version).cast("long").alias(VERSION),
        F.lit(served.identity).alias(IDENTITY),
        *(F.col(n) for n in [*prediction_names, DEFAULTS_USED, MISSING]),
    )
    result = ScoreResult(request.output, served.model, served.version, served.identity)

    def check(temp: str) -> None:
        written = spark.read.parquet(temp)
        counts = written.agg(
            F.count(F.lit(1)).alias("rows"),
            F.count(F.col(prediction_names[0])).alias("scored"),
            F.sum(F.col(DEFAULTS_USED).cast("long")).alias("defaults"),
        ).first()
        assert counts is not None
        result.rows, result.scored, result.defaults_used = (
            counts["rows"],
            counts["scored"],
            counts["defaults"] or 0,
        )
        if checking:
            rows = RowNames(tuple(keys), request.timestamp)
            result.checks = _checks(request, served, plan, scored, rows, result.scored)

    try:
        write_whole(output, target, check)
    finally:
        if checking:
            scored.unpersist()
    result.output = target.uri
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _checks(
    request: ScoreRequest, served: ServedVersion, plan: ScoringPlan, scored: DataFrame, rows: RowNames, n: int
) -> dict[str, Any]:
    """Both checks on one sample of the scored rows (up to ``check_rows`` of the ``n`` scored)."""
    from pyspark.sql import functions as F

    first = plan.answers.columns()[0][0]
    candidates = scored.where(F.col(first).isNotNull())
    # a fraction with room to spare, then the limit: no sort of the whole output for a sample
    fraction = min(1.0, 3.0 * request.check_rows / max(n, 1))
    sample = candidates.sample(fraction=fraction, seed=7).limit(request.check_rows).toArrow()
    checks: dict[str, Any] = {}
    for who, url, run in (
        ("triton", request.check_triton, triton_problems),
        ("gateway", request.check_gateway, gateway_problems),
    ):
        if not url:
            continue
        problems = run(url, served, plan, sample, rows)
        checks[who] = {"url": url, "rows": sample.num_rows, "mismatches": len(problems)}
        if problems:
            raise SkewError(
                f"{len(problems)} of {sample.num_rows} sampled rows differ between the batch and {who} "
                f"({served.label}); nothing was written",
                problems[:SHOWN_PROBLEMS],
                hint=f"the batch ran {served.label}'s model.onnx (export {served.identity[:12]}…): check "
                f"that {who} serves that export, and that the online store holds the rows' features",
            )
    return checks
