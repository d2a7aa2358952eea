"""Registers the load test's options (``loadtests.settings.OPTION_SPECS``) on Locust's parser.

Locust fires ``init_command_line_parser`` when it builds its parser, after the locustfile is
imported, so registering here at import is Locust's own extension point, not parsing at import.
"""

from __future__ import annotations

import itertools
from typing import Any

from locust import events
from locust.env import Environment

from loadtests.settings import OPTION_SPECS, LoadOptions


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    for spec in OPTION_SPECS:
        parser.add_argument(
            spec.flag, type=spec.type, default=spec.default, env_var=spec.env_var, help=spec.help
        )


def load_options(environment: Environment) -> LoadOptions:
    """The options of this run, as the users read them."""
    return LoadOptions.from_namespace(environment.parsed_options)


# Distinct, reproducible seeds per simulated user (run N's user k draws the same rows as
# run N+1's user k), process-wide because Locust creates users one by one.
_user_numbers = itertools.count()


def user_seed(options: LoadOptions, kind: str) -> str:
    return f"{options.seed}-{kind}-{next(_user_numbers)}"
