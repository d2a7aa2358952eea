"""The Open Inference Protocol (KServe v2) on the gateway: the translation, free of transports.

OIP clients (``tritonclient``, KServe's client, ``perf_analyzer``, a KServe transformer) see the
gateway as one model server: each model takes its entity keys and request-time fields as named
``[N, 1]`` tensors and answers its predictions as tensors by kind. The translation both
transports share lives here, and the transports (gateway/http/oip.py, gateway/grpc/oip.py) only
read their wire format into it:

- ``tensors``: OIP tensors on the wire (JSON ``data``, raw little-endian bytes) <-> Python values;
- ``mapping``: a ModelSpec's inputs and outputs as tensors, a request as the typed
  ``PredictRequest`` every transport parses into, a ``PredictResult`` as output tensors.

It is a room of its own rather than part of the core because it is one protocol's vocabulary
(datatypes, shapes, tensor metadata): the core (gateway/core.py) knows only ``PredictRequest``
and ``PredictResult``, as it does for ``/v1``. Nothing below the translation changes: features,
auth, limits, drift, the payload log and the error tree are the ``/v1`` routes' own
(docs/gateway.md, "Open Inference Protocol").
"""
