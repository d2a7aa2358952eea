"""Load on the gateway: ``POST /v1/models/{model}/predict`` with entity-id rows."""

from __future__ import annotations

from urllib.parse import quote

from locust import FastHttpUser, task
from locust.env import Environment

from loadtests.payloads import EntityRows
from loadtests.responses import gateway_problem
from loadtests.users.options import load_options, user_seed


class GatewayUser(FastHttpUser):
    """One client of the gateway: rows with random users/merchants from the feature repo's
    ranges, a request-time amount and hour; the answer must hold one prediction per row."""

    connection_timeout = 5.0

    def __init__(self, environment: Environment) -> None:
        # before super().__init__: it builds the HTTP client from network_timeout
        self.options = load_options(environment)
        self.network_timeout = self.options.request_timeout
        super().__init__(environment)

    def on_start(self) -> None:
        self.rows = EntityRows(
            self.options.user_ids, self.options.merchant_ids, seed=user_seed(self.options, "gateway")
        )
        self.path = f"/v1/models/{quote(self.options.model, safe='')}/predict"
        self.headers = {"Content-Type": "application/json"}
        if self.options.api_key:
            self.headers["Authorization"] = f"Bearer {self.options.api_key}"

    def wait_time(self) -> float:
        return self.options.think_time

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
