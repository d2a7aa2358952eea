"""What the two JSON-over-HTTP users (gateway, Triton v2) share."""

from __future__ import annotations

from locust import FastHttpUser
from locust.env import Environment

from loadtests.users.options import load_options


class JsonHttpUser(FastHttpUser):
    """Options read once per user, their request timeout and think time, and the JSON headers
    (with ``--api-key`` as a bearer token) every request sends."""

    abstract = True  # not a user Locust may pick on its own
    connection_timeout = 5.0

    def __init__(self, environment: Environment) -> None:
        # before super().__init__: it builds the HTTP client from network_timeout
        self.options = load_options(environment)
        self.network_timeout = self.options.request_timeout
        super().__init__(environment)
        self.headers = {"Content-Type": "application/json"}
        if self.options.api_key:
            self.headers["Authorization"] = f"Bearer {self.options.api_key}"

    def wait_time(self) -> float:
        return self.options.think_time
