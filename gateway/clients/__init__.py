"""The gateway's clients of what it calls: Triton over HTTP (``triton_http``) and over gRPC
(``triton_grpc``), ``connect`` choosing one by the URL (``triton``), and the online feature reads
(``features``, with the resolved per-view reads of ``online_read``). Each puts a deadline on every
call and turns its failures into the error tree (gateway/errors.py); the core (gateway/core.py)
sees only the ``Triton`` protocol and ``OnlineFeatures``."""
