"""The gateway over gRPC, as KServe lays out its gRPC server: ``v1`` (the gateway's own
``gateway.v1.Gateway``) and ``oip`` (the Open Inference Protocol's
``inference.GRPCInferenceService``), each only translating to and from the transport-free core
(gateway/core.py); ``handling`` (the one auth check and error status for both) and ``server``."""
