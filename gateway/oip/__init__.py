"""The Open Inference Protocol (KServe v2) on the gateway, over HTTP and gRPC.

OIP clients (``tritonclient``, KServe's client, ``perf_analyzer``, a KServe transformer) see the
gateway as one model server: each model takes its entity keys and request-time fields as named
``[N, 1]`` tensors and answers its predictions as tensors by kind. The translation lives here,
in three small modules, and the transports only wire it in:

- ``tensors``: OIP tensors on the wire (JSON ``data``, raw little-endian bytes) <-> Python values;
- ``mapping``: a ModelSpec's inputs and outputs as tensors, a request as the typed
  ``PredictRequest`` every transport parses into, a ``PredictResult`` as output tensors;
- ``http`` and ``grpc``: the protocol's routes and RPCs.

Nothing below the translation changes: features, auth, limits, drift, the payload log and the
error tree are the ``/v1`` routes' own (docs/gateway.md, "Open Inference Protocol").
"""
