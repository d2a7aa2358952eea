"""The locustfile the gate runs (``locust -f loadtests/locustfile.py USERCLASS ...``).

Users: ``GatewayUser`` (gateway HTTP), ``TritonHttpUser`` (Triton v2 HTTP), ``TritonGrpcUser``
(Triton gRPC); name one on the command line, or Locust runs all three. Their options
(``--model``, ``--model-repo``, ``--rows-per-request``, ...; see ``locust -f ... --help``) come
from ``loadtests.settings``. The load shape is ``$LOADTESTS_SHAPE`` (steady, step, spike).

Run by hand, e.g.::

    LOADTESTS_SHAPE=step locust -f loadtests/locustfile.py TritonHttpUser --headless \\
        --host http://127.0.0.1:8000 -u 8 -r 8 -t 40s --model fraud-detector
"""

from __future__ import annotations

from loadtests.shapes import selected_shape
from loadtests.users.gateway import GatewayUser
from loadtests.users.triton_grpc import TritonGrpcUser
from loadtests.users.triton_http import TritonHttpUser

# Exactly one shape class in this namespace: Locust uses the first one it finds.
LoadShape = selected_shape()

__all__ = ["GatewayUser", "LoadShape", "TritonGrpcUser", "TritonHttpUser"]
