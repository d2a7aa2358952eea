"""Load on Triton over HTTP: KServe v2 ``POST /v2/models/{model}[/versions/{v}]/infer`` (JSON)."""

from __future__ import annotations

from urllib.parse import quote

from locust import task

from loadtests.responses import v2_problem
from loadtests.users.http_base import JsonHttpUser
from loadtests.users.model_inputs import http_metadata, model_inputs
from loadtests.users.options import user_seed


class TritonHttpUser(JsonHttpUser):
    """One v2 HTTP client of Triton (or of a KServe predictor): the input example, jittered,
    ``--rows-per-request`` rows per call; every output must have that many rows."""

    def on_start(self) -> None:
        self.inputs = model_inputs(
            self.options,
            user_seed(self.options, "triton-http"),
            lambda: http_metadata(self.host or "", self.options),
        )
        version = f"/versions/{quote(self.options.model_version)}" if self.options.model_version else ""
        self.path = f"/v2/models/{quote(self.options.model, safe='')}{version}/infer"

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
