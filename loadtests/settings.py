"""The load test's own options, in one table shared by both halves.

The Locust side registers each as a Locust custom argument (``--model``, ...; settable through
the environment variable next to it too, e.g. ``LOADTESTS_MODEL``), the gate side turns its own
flags into the same arguments, and the users read them back as one frozen ``LoadOptions``. No
Locust import here, so the gate and the unit tests use this module freely.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class OptionSpec:
    flag: str
    env_var: str
    default: Any
    type: type
    help: str

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


OPTION_SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("--model", "LOADTESTS_MODEL", "fraud-detector", str, "model name (Triton and gateway)"),
    OptionSpec(
        "--model-version", "LOADTESTS_MODEL_VERSION", "", str, "model version; empty = Triton's choice"
    ),
    OptionSpec(
        "--model-repo",
        "LOADTESTS_MODEL_REPO",
        "model_repo",
        str,
        "Triton model repository to take the input example from; when it lacks the model, the "
        "input signature is read from the server and rows are generated",
    ),
    OptionSpec("--rows-per-request", "LOADTESTS_ROWS", 1, int, "rows (batch size) in each request"),
    OptionSpec(
        "--entities",
        "LOADTESTS_ENTITIES",
        "",
        str,
        "Parquet or CSV file of entity rows the gateway user sends (join keys, optional request "
        "fields); empty = the keys the feature repo's online store has",
    ),
    OptionSpec(
        "--feature-repo",
        "LOADTESTS_FEATURE_REPO",
        "feature_repo",
        str,
        "Feast repository whose online store the gateway user draws existing entities from "
        "(the model's feature service, from --model-repo)",
    ),
    OptionSpec(
        "--user-ids",
        "LOADTESTS_USER_IDS",
        "1-500",
        str,
        "entity id range of users (gateway; only without --entities or a feature repo)",
    ),
    OptionSpec("--merchant-ids", "LOADTESTS_MERCHANT_IDS", "1-100", str, "entity id range of merchants"),
    OptionSpec(
        "--channels",
        "LOADTESTS_CHANNELS",
        "web,app,pos",
        str,
        "comma-separated values of the request-time field channel (gateway); empty sends no channel",
    ),
    OptionSpec("--request-timeout", "LOADTESTS_REQUEST_TIMEOUT", 10.0, float, "seconds per request"),
    OptionSpec(
        "--think-time", "LOADTESTS_THINK_TIME", 0.0, float, "seconds each user waits between requests"
    ),
    OptionSpec("--seed", "LOADTESTS_SEED", 0, int, "seed of the generated rows"),
)
# Secrets only through the environment: a command line is visible to every local user (ps).
API_KEY_ENV = "LOADTESTS_API_KEY"
SHAPE_ENV = "LOADTESTS_SHAPE"


@dataclass(frozen=True)
class LoadOptions:
    """Options as the Locust users see them."""

    model: str = "fraud-detector"
    model_version: str = ""
    model_repo: str = "model_repo"
    rows_per_request: int = 1
    entities: str = ""
    feature_repo: str = "feature_repo"
    user_ids: str = "1-500"
    merchant_ids: str = "1-100"
    channels: str = "web,app,pos"
    request_timeout: float = 10.0
    think_time: float = 0.0
    seed: int = 0
    api_key: str = ""

    @classmethod
    def from_namespace(cls, namespace: Any, environ: dict[str, str] | None = None) -> LoadOptions:
        """From Locust's ``parsed_options`` (missing attributes keep their defaults)."""
        import os

        values: dict[str, Any] = {}
        for spec in OPTION_SPECS:
            value = getattr(namespace, spec.dest, None) if namespace is not None else None
            if value is not None:
                values[spec.dest] = spec.type(value)
        values["api_key"] = (environ if environ is not None else os.environ).get(API_KEY_ENV, "")
        options = cls(**values)
        if options.rows_per_request < 1:
            raise ValueError(f"--rows-per-request must be at least 1, got {options.rows_per_request}")
        return options

    @property
    def repo_path(self) -> Path:
        return Path(self.model_repo).expanduser()

    def to_locust_args(self) -> list[str]:
        """The Locust command-line arguments that reproduce these options (no secrets)."""
        args: list[str] = []
        by_dest = {spec.dest: spec for spec in OPTION_SPECS}
        for field in fields(self):
            spec = by_dest.get(field.name)
            if spec is not None:
                args += [spec.flag, str(getattr(self, field.name))]
        return args
