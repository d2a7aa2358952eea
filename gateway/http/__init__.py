"""The gateway over HTTP, as KServe lays out its REST server: ``app`` (the ASGI app), ``v1`` (the
gateway's own ``/v1`` API) and ``oip`` (the Open Inference Protocol's ``/v2``), each only
translating to and from the transport-free core (gateway/core.py); ``asgi`` (the bare hot
routes), ``handling`` (the one auth check and error answer), ``bodies`` (JSON in and out) and
``server`` (uvicorn)."""
