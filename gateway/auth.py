"""Optional API-key / bearer-token auth, with constant-time comparison.

Keys come from ``GATEWAY_API_KEYS`` (comma separated) and/or ``GATEWAY_API_KEYS_FILE`` (one key
per line, e.g. a mounted Kubernetes Secret). No keys configured = auth off. A request without a
key is 401; with a wrong key, 403. Keys are never logged.
"""

from __future__ import annotations

import hmac

from gateway.errors import Forbidden, Unauthenticated
from gateway.settings import GatewaySettings


class ApiKeys:
    def __init__(self, keys: list[str]) -> None:
        self._keys = [k.encode() for k in keys if k]

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> ApiKeys:
        keys: list[str] = []
        if settings.auth.api_keys is not None:
            keys += [k.strip() for k in settings.auth.api_keys.get_secret_value().split(",")]
        if settings.auth.api_keys_file is not None:
            keys += [line.strip() for line in settings.auth.api_keys_file.read_text().splitlines()]
        return cls([k for k in keys if k and not k.startswith("#")])

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check(self, api_key: str | None, authorization: str | None) -> None:
        """Raise Unauthenticated/Forbidden unless one of the headers carries a known key."""
        if not self.enabled:
            return
        presented = api_key
        if presented is None and authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() == "bearer" and token:
                presented = token.strip()
        if not presented:
            raise Unauthenticated("missing API key: send X-API-Key or Authorization: Bearer")
        candidate = presented.encode()
        # compare against every key, so timing does not reveal which (or whether one) matched
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(candidate, key)
        if not matched:
            raise Forbidden("API key not accepted")
