"""Load on the gateway: ``POST /v1/models/{model}/predict`` with entity-id rows."""

from __future__ import annotations

from urllib.parse import quote

from locust import task

from loadtests.payloads import EntityRows, parse_channels
from loadtests.responses import gateway_problem
from loadtests.users.http_base import JsonHttpUser
from loadtests.users.options import user_seed


class GatewayUser(JsonHttpUser):
    """One client of the gateway: rows with random users/merchants from the feature repo's
    ranges, a request-time amount, hour and channel; the answer must hold one prediction per row."""

    def on_start(self) -> None:
        self.rows = EntityRows(
            self.options.user_ids,
            self.options.merchant_ids,
            seed=user_seed(self.options, "gateway"),
            channels=parse_channels(self.options.channels),
        )
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
