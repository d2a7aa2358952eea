"""The Spark session of the gateway's offline commands, and the refusal without pyspark or Java.

Under ``spark-submit`` the session is spark-submit's; run directly, a local one
(``--spark-master``, default ``local[*]``) whose Python workers are this interpreter.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXTRA = "spark"
EXTRA_PACKAGES = ("pyspark",)  # pyproject.toml's spark extra
APP_NAME = "gateway-offline"
# UTC: the log's timestamps are instants; nanosecond Parquet timestamps (pandas') as longs
# rather than refused (the readers turn them back into times).
SQL_CONF = {"spark.sql.session.timeZone": "UTC", "spark.sql.legacy.parquet.nanosAsLong": "true"}


class SparkUnavailable(Exception):
    """pyspark or Java is missing, or Spark did not start; ``hint`` says what to install."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def local_cores(master: str | None) -> int:
    """The cores of a local master (``local``, ``local[4]``, ``local[*]``; None: ``local[*]``)."""
    inside = (master or "local[*]").partition("[")[2].split(",")[0].rstrip("]")
    return int(inside) if inside.isdigit() else (1 if master == "local" else os.cpu_count() or 1)


def spark_session(master: str | None = None) -> SparkSession:
    """The active session, else spark-submit's, else a local one on ``master``."""
    try:
        importlib.import_module("pyspark.sql")
    except ImportError as exc:
        raise SparkUnavailable(
            f"--engine spark needs the {EXTRA} extra, which is not installed ({_first_line(exc)})",
            f"install the {EXTRA} extra ({', '.join(EXTRA_PACKAGES)}) with the lock's versions and hashes: "
            "make venv (every extra, from requirements/project.lock)",
        ) from exc
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise SparkUnavailable(
            "Spark needs a Java runtime (17 or 21), and no java is on PATH nor JAVA_HOME set",
            "install one: sudo apt-get install openjdk-17-jre-headless",
        )
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(APP_NAME)
    local = master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ  # not under spark-submit
    if local:
        builder = builder.master(master or "local[*]")
        # Spark starts Python workers with $PYSPARK_PYTHON (else `python3` on PATH, without this
        # venv's packages); a user's setting wins.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        # Spark's default of 200 shuffle partitions is a cluster's: on a few local cores each
        # is a task with its own Python round trip (100k rows scored 25x slower than with 4).
        if (master or "local").startswith("local"):
            builder = builder.config("spark.sql.shuffle.partitions", str(2 * local_cores(master)))
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j and the JVM launcher raise plain exceptions
        raise SparkUnavailable(
            f"Spark did not start: {_first_line(exc)}", "check `java -version` and the master"
        ) from exc
    for key, value in SQL_CONF.items():
        spark.conf.set(key, value)
    if local:
        spark.sparkContext.setLogLevel("OFF")  # a failure is the command's one error line
    return spark
