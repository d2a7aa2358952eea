"""Load on the gateway: ``POST /v1/models/{model}/predict`` with entity-id rows."""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import quote

from locust import events, task
from locust.env import Environment
from locust.runners import MasterRunner

from loadtests.entities import gateway_rows
from loadtests.responses import gateway_problem
from loadtests.users.http_base import JsonHttpUser
from loadtests.users.options import load_options, user_seed


class GatewayUser(JsonHttpUser):
    """One client of the gateway: rows of entities the online store has (``--entities``, else
    the feature repo's online store, else the id ranges; loadtests/entities.py) with the model's
    request-time fields; the answer must hold one prediction per row."""

    def on_start(self) -> None:
        self.rows = gateway_rows(self.options, seed=user_seed(self.options, "gateway"))
        self.path = f"/v1/models/{quote(self.options.model, safe='')}/predict"

    @task
    def predict(self) -> None:
        n = self.options.rows_per_request
        with self.client.post(
            self.path, json=self.rows.body(n), headers=self.headers, name="predict", catch_response=True
        ) as response:
            problem = gateway_problem(response.status_code or 0, response.content, n)
            if problem:
                response.failure(problem)
            else:
                response.success()


@events.init.add_listener
def _read_the_entities_first(environment: Environment, **_: Any) -> None:
    """The online store's entity pool, read once as the process starts, before the run's window:
    each user's ``on_start`` then finds it cached (``online_entities``). Read by the first users'
    ``on_start``, it took seconds of the window, and a short run sent no request at all (a 6 s
    gate in CI). A failure here is left to ``on_start``, which reports it as before."""
    if GatewayUser not in environment.user_classes or isinstance(environment.runner, MasterRunner):
        return
    with contextlib.suppress(Exception):
        gateway_rows(load_options(environment), seed="entities")
