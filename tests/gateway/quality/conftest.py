"""Fixtures of the quality tests: one local Spark session (local[2]) for the Spark engine's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from gateway.spark.session import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()
