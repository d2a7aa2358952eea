"""What runs on the executors: the exported graph in onnxruntime over Arrow batches.

``with_answers`` adds the answers to the joined rows through an Arrow UDF (``scorer``, its
iterator form: one call per partition with its Arrow batches): only the model's columns cross
to Python, and only the answers come back (the prediction columns, ``defaults_used`` and
``missing_features``, as one struct). The graph's bytes travel once per executor as a broadcast
variable; each Python worker builds one onnxruntime session from them and keeps it for every
partition it runs (Spark reuses its Python workers), with as many intra-op threads as a task
has cores (``spark.task.cpus``): one task per core, so sessions do not fight over the cores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from builder.score.answers import AnswerPlan, answer_columns
from builder.score.inputs import InputPlan, feeds, model_inputs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

DEFAULTS_USED = "defaults_used"
MISSING = "missing_features"
ANSWER = "_answer"  # the struct the UDF returns, before its fields become columns


@dataclass(frozen=True)
class ScoringPlan:
    inputs: InputPlan
    answers: AnswerPlan
    digest: str  # the graph's sha256: which session a worker's cache holds
    threads: int = 1


@dataclass
class GraphRunner:
    """One onnxruntime session and what the feeds need from the graph."""

    session: Any
    matrix_input: str
    outputs: list[str]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.outputs, self.session.run(self.outputs, feeds), strict=True))


# One session per Python worker process and graph: a worker runs many partitions, and a session
# costs a graph optimization. Spark, not this module, decides how long a worker lives.
_RUNNERS: dict[tuple[str, int], GraphRunner] = {}


def runner(digest: str, threads: int, graph: Callable[[], bytes], outputs: list[str]) -> GraphRunner:
    """This process's session of the graph ``digest`` (made from ``graph()`` on first use)."""
    key = (digest, threads)
    if key not in _RUNNERS:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(graph(), options, providers=["CPUExecutionProvider"])
        _RUNNERS[key] = GraphRunner(session, session.get_inputs()[0].name, outputs)
    return _RUNNERS[key]


def answer_batch(plan: ScoringPlan, graph: GraphRunner, batch: pa.RecordBatch) -> pa.StructArray:
    """The answers to ``batch`` (the model's columns, by source name): one struct per row with the
    prediction columns, ``defaults_used`` and ``missing_features``."""
    fed = feeds(plan.inputs, batch)
    rows = np.flatnonzero(fed.scorable)
    outputs = graph.run(model_inputs(plan.inputs, fed.tensors, rows, graph.matrix_input)) if len(rows) else {}
    added = answer_columns(plan.answers, outputs, fed.scorable)
    names = [name for name, _, _ in plan.answers.columns()]
    return pa.StructArray.from_arrays(
        [*added, pa.array(fed.defaults_used), fed.missing], names=[*names, DEFAULTS_USED, MISSING]
    )


def answer_type(plan: ScoringPlan) -> str:
    """The answers' struct as Spark DDL."""
    fields = [*((name, ddl) for name, _, ddl in plan.answers.columns()), (DEFAULTS_USED, "boolean"),
              (MISSING, "array<string>")]  # fmt: skip
    return "struct<" + ", ".join(f"`{name}`: {ddl}" for name, ddl in fields) + ">"


def scorer(plan: ScoringPlan, graph: Any) -> Any:
    """The Arrow UDF over the model's columns (``plan.inputs``' sources, in order) and the
    broadcast ``graph`` (its ``.value`` is the ONNX bytes): only those columns cross to Python,
    and only the answers come back; the iterator form keeps one session for every batch."""
    from pyspark.sql.functions import arrow_udf

    outputs = plan.answers.outputs()
    sources = [c.source for c in plan.inputs.columns]

    def score(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        session = runner(plan.digest, plan.threads, lambda: graph.value, outputs)
        for arrays in batches:
            yield answer_batch(plan, session, pa.RecordBatch.from_arrays(list(arrays), names=sources))

    # The UDF's kind (an iterator of column tuples) is read from score's annotations; pyspark's
    # stubs do not list that overload. Nondeterministic: Spark must run it once per row, not
    # once per answer field it extracts.
    make: Any = arrow_udf
    return make(score, answer_type(plan)).asNondeterministic()


def with_answers(frame: DataFrame, plan: ScoringPlan, graph: Any) -> DataFrame:
    """``frame`` (the joined rows) with the answer columns (``plan.answers.columns()``,
    ``defaults_used``, ``missing_features``) added."""
    from pyspark.sql import functions as F

    answer = scorer(plan, graph)(*(F.col(f"`{c.source}`") for c in plan.inputs.columns))
    return frame.withColumn(ANSWER, answer).select("*", f"{ANSWER}.*").drop(ANSWER)
