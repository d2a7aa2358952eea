"""MLflow deployments plugin ``triton-stack`` (entry point group ``mlflow.deployments``).

``mlflow deployments create -t triton-stack:/path/to/model_repo?triton=http://127.0.0.1:8000
-m models:/NAME@ALIAS --name NAME`` runs ``builder export`` (conversion, parity, configs,
ensembles) into the repository, then loads the model into the Triton server serving it.

MLflow's plugin contract: this module has exactly one ``BaseDeploymentClient`` subclass,
``run_local`` and ``target_help``.
"""

from __future__ import annotations

from builder.mlflow_deploy.client import TritonStackDeploymentClient
from builder.mlflow_deploy.local import run_local

__all__ = ["TritonStackDeploymentClient", "run_local", "target_help"]


def target_help() -> str:
    """What ``mlflow deployments help -t triton-stack`` prints."""
    return """\
triton-stack: export MLflow registry models with `builder export` (ONNX conversion, parity check,
Triton configs, ensembles) into a Triton model repository, and load them into a Triton server.

Target URI
  triton-stack:/path/to/model_repo?triton=http://127.0.0.1:8000
  triton-stack:model_repo                 (relative to the current folder)
  triton-stack                            (with TRITON_STACK_REPO / TRITON_STACK_URL set)
  The repository is a local folder (object-store URIs are refused: sync the folder after the
  export). The Triton URL (default http://127.0.0.1:8000) must be the HTTP endpoint of a server
  on that repository in explicit model-control mode:
    builder serve --repo /path/to/model_repo --model-control-mode explicit
  Precedence: -C repo= / -C triton_url= over the URI over TRITON_STACK_REPO / TRITON_STACK_URL.

Config (-C key=value) for create and update: builder export's options of the same names
  ensemble=true  ensemble_mode=steps|fused  version_policy=latest:1|all|specific:1,3
  max_batch_size=64  instances=1  dynamic_batching=true  warmup=true
  atol=1e-5  rtol=1e-5  parity_rows=64  opset=17  force=false  timeout=120 (seconds, Triton calls)
Config for delete: keep_files=true keeps the model's folder (default: removed after unload).
Flavor: leave it out (or onnx): the builder converts from the model's own flavor.

Deployments are the repository's Triton models; a deployment's versions are the registry
versions exported into it (update exports a new one and reloads).
predict takes a DataFrame or MLflow's serving JSON ({"dataframe_split": ...},
{"dataframe_records": ...}, {"inputs": ...}) and answers {"predictions": {output: [...]}}.
run-local exports into a temp repository and serves it on 127.0.0.1 (-C http_port=8000
grpc_port=8001 metrics_port=8002, -C repo=DIR to keep the export) until Ctrl-C.
"""
