"""The Spark session ``builder score`` runs on, and the refusal without pyspark or Java.

Under ``spark-submit`` the session is the one spark-submit configured (its master, executors,
Python); run directly, it is a local one (``--master``, default ``local[*]``), whose Python
workers are this interpreter, so that they import the same pyspark, pyarrow and onnxruntime.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from typing import TYPE_CHECKING

from builder.errors import first_line
from builder.score.errors import SparkUnavailableError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXTRA = "spark"
# pyproject.toml's spark extra (tests/builder/score/test_score_errors.py keeps the two equal)
EXTRA_PACKAGES = ("pyspark",)
APP_NAME = "builder-score"
SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # pandas (and so Feast's sources, and most entity tables) write nanosecond timestamps, which
    # Spark refuses to read unless as longs: table.py and join.py turn such longs into timestamps.
    "spark.sql.legacy.parquet.nanosAsLong": "true",
}


def require_spark() -> None:
    """Import pyspark; SparkUnavailableError naming the extra when it is not installed, and
    naming Java when no ``java`` is found (pyspark starts a JVM)."""
    try:
        importlib.import_module("pyspark.sql")
    except ImportError as exc:
        raise SparkUnavailableError(
            f"builder score needs the {EXTRA} extra, which is not installed ({first_line(exc, 200)})",
            hint=f"install the {EXTRA} extra ({', '.join(EXTRA_PACKAGES)}) with the lock's versions and "
            "hashes, in the project's checkout: make venv (every extra, from requirements/project.lock)",
        ) from exc
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise SparkUnavailableError(
            "Spark needs a Java runtime (17 or 21), and no java is on PATH nor JAVA_HOME set",
            hint="install one: sudo apt-get install openjdk-17-jre-headless (make test does it as root)",
        )


def in_spark_submit() -> bool:
    """Whether this process is a driver spark-submit started (its JVM is already up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_cores(master: str | None) -> int:
    """The cores of a local master (``local``, ``local[4]``, ``local[*]``; None: ``local[*]``)."""
    inside = (master or "local[*]").partition("[")[2].split(",")[0].rstrip("]")
    return int(inside) if inside.isdigit() else (1 if master == "local" else os.cpu_count() or 1)


def spark_session(master: str | None = None) -> SparkSession:
    """The active session, else a new one: spark-submit's, or a local one on ``master``."""
    require_spark()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(APP_NAME)
    local = master is not None or not in_spark_submit()
    if local:
        builder = builder.master(master or "local[*]")
        # Spark starts Python workers with $PYSPARK_PYTHON (else `python3` on PATH, without this
        # venv's packages); a user's setting wins.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.ui.enabled", "false")
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        # Spark's default of 200 shuffle partitions is a cluster's: on a few local cores each
        # is a task with its own Python round trip (100k rows scored 25x slower than with 4).
        if (master or "local").startswith("local"):
            builder = builder.config("spark.sql.shuffle.partitions", str(2 * local_cores(master)))
    # Timestamps are instants: shown and parsed in UTC, whatever the machine's zone (Feast's
    # point-in-time join is in UTC too).
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    try:
        spark = builder.getOrCreate()
        for key, value in SQL_CONF.items():  # SQL settings: also on a session that already ran
            spark.conf.set(key, value)
        if local:
            # A local run is a command: a failure is its one `error:` line, not Spark's logged
            # stack traces; spark-submit's driver keeps its own logging.
            spark.sparkContext.setLogLevel("OFF")
        return spark
    except Exception as exc:  # py4j and the JVM launcher raise plain exceptions
        raise SparkUnavailableError(
            f"Spark did not start: {first_line(exc, 300)}",
            hint="check `java -version` (17 or 21) and --master",
        ) from exc
