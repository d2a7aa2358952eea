"""Load on Triton over HTTP: KServe v2 ``POST /v2/models/{model}[/versions/{v}]/infer`` (JSON)."""

from __future__ import annotations

from urllib.parse import quote

from locust import FastHttpUser, task
from locust.env import Environment

from loadtests.responses import v2_problem
from loadtests.users.model_inputs import http_metadata, model_inputs
from loadtests.users.options import load_options, user_seed


class TritonHttpUser(FastHttpUser):
    """One v2 HTTP client of Triton (or of a KServe predictor): the input example, jittered,
    ``--rows-per-request`` rows per call; every output must have that many rows."""

    connection_timeout = 5.0

    def __init__(self, environment: Environment) -> None:
        # before super().__init__: it builds the HTTP client from network_timeout
        self.options = load_options(environment)
        self.network_timeout = self.options.request_timeout
        super().__init__(environment)

    def on_start(self) -> None:
        self.inputs = model_inputs(
            self.options,
            user_seed(self.options, "triton-http"),
            lambda: http_metadata(self.host or "", self.options),
        )
        version = f"/versions/{quote(self.options.model_version)}" if self.options.model_version else ""
        self.path = f"/v2/models/{quote(self.options.model, safe='')}{version}/infer"
        self.headers = {"Content-Type": "application/json"}
        if self.options.api_key:
            self.headers["Authorization"] = f"Bearer {self.options.api_key}"

    def wait_time(self) -> float:
        return self.options.think_time

    @task
    def infer(self) -> None:
        n = self.options.rows_per_request
        body = self.inputs.v2_json(n)
        with self.client.post(
            self.path, json=body, headers=self.headers, name="infer", catch_response=True
        ) as response:
            problem = v2_problem(response.status_code or 0, response.content, n)
            if problem:
                response.failure(problem)
            else:
                response.success()
