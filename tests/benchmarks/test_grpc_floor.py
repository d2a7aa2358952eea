"""grpcio's floor server (benchmarks/grpc_floor.py) answers the gateway's own method with the
answer it was given, to the client the benchmark drives the gateway with, and does nothing
else: no key is asked for, any request bytes are taken."""

from __future__ import annotations

from pathlib import Path

import grpc

from benchmarks.grpc_floor import floor_server
from builder.runtime.ports import free_port
from gateway.proto import gateway_pb2, gateway_pb2_grpc, to_value


def test_the_floor_answers_predict_with_the_given_response(tmp_path: Path) -> None:
    answer = gateway_pb2.PredictResponse(model="fraud", model_version="3", id="a")
    answer.predictions.add(score=0.25)
    port = free_port()
    with floor_server(port, answer.SerializeToString(), tmp_path) as proc:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            row = gateway_pb2.Row(fields={"user_id": to_value(7)})
            for model in ("fraud", "a model it has never heard of"):
                reply = stub.Predict(gateway_pb2.PredictRequest(model=model, rows=[row]), timeout=10)
                assert reply == answer
        assert proc.poll() is None
    assert proc.poll() is not None  # stopped on exit
