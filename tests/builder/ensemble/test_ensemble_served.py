"""``builder export --ensemble`` in both shapes (the real CLI), served by the real Triton: the
``steps`` ensemble (ONNX pre/postprocess models + a Triton ensemble) and the ``fused`` graph
answer exactly what the bare model plus the numpy reference math answer, and ``builder
validate`` accepts the repository. A run that logs its own Python-backend steps (a pre step
that clips the raw features, a business rule that caps the score) gets them wired around the
generated ones, and served by the same Triton, with a post step that is another registered
model (a small regressor over the probabilities, exported through the normal path as the ONNX
step ``ensuser_risk``). Typed-column Pipelines (their preprocessing in
their graph) get post-only ensembles in both shapes: the model's answers with the run's
threshold (binary) or the class looked up by name (multiclass, string classes), read as the
gateway reads them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from builder.ensemble_models import transforms
from builder.errors import RegistryError
from builder.export import ExportRequest, export_model
from builder.runtime.server import TritonServer
from support import models, servers
from tests.builder import helpers

pytestmark = pytest.mark.integration

MODES = {"steps": "enssteps", "fused": "ensfused"}
USER = "ensuser"  # the model whose run logs its own serving steps
RISK = "ensrisk"  # a registered model one of those steps runs (a regressor over probabilities)
USER_OUTPUTS = ["probabilities", "score", "label", "risk"]  # all: Triton's ensembles need them all
# Typed-column Pipelines (tests/helpers.py), one registered name per mode.
TYPED = {
    "binary": (helpers.column_transformer_logistic, 0.3),
    "multiclass": (helpers.column_transformer_multiclass_strings, None),
}
FEAST = {"feast.feature_service": "svc", "feast.entity_keys": "user_id", "feast.request_fields": ""}
LOW, HIGH, CAP = 0.0, 500.0, 0.8

# Python-backend models as a team writes them: they run in Triton's own Python (numpy<2).
CLIP_CODE = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.low = float(params["low"]["string_value"])
        self.high = float(params["high"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "raw").as_numpy()
            clipped = np.clip(x, self.low, self.high).astype(np.float32)  # NaN stays NaN
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("clipped", clipped)]))
        return responses
"""
CAP_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            score = pb_utils.get_input_tensor_by_name(request, "score").as_numpy()
            capped = np.minimum(score, np.float32(0.8))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("capped", capped)]))
        return responses
"""
CLIP_STEP = {
    "position": "pre",
    "inputs": [{"name": "raw", "data_type": "TYPE_FP32", "dims": [5], "from": "input"}],
    "outputs": [{"name": "clipped", "data_type": "TYPE_FP32", "dims": [5], "to": "input"}],
    "config": {"parameters": {"low": str(LOW), "high": str(HIGH)}},
}
CAP_STEP = {
    "position": "post",
    "inputs": [{"name": "score", "data_type": "TYPE_FP32", "dims": [1], "from": "score"}],
    "outputs": [{"name": "capped", "data_type": "TYPE_FP32", "dims": [1], "to": "score"}],
}
# Another registered model as a step: its tensors (the exported graph's `input`, `prediction`)
# need no types here; it reads the model's probabilities and writes a new ensemble output.
RISK_STEP = {
    "position": "post",
    "model": f"models:/{RISK}@champion",
    "inputs": [{"name": "input", "from": "probabilities"}],
    "outputs": [{"name": "prediction", "to": "risk"}],
}


def builder(*args: str) -> subprocess.CompletedProcess[str]:
    # the CLI's own entry in this process (each fresh interpreter would pay ~4 s of imports)
    return helpers.builder_in_process(*args)


def infer(server: TritonServer, model: str, x: np.ndarray, outputs: list[str]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


@pytest.fixture(scope="module")
def served(
    mlflow_registry: str, triton_runtime: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TritonServer, Path, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("ensemble-onnx")
    repo = root / "model_repo"
    registered = {}
    for mode, name in MODES.items():
        registered[mode] = models.sklearn_for_ensemble(name)
        args = ["export", f"models:/{name}@champion", "--repo", str(repo), "--ensemble"]
        cli = builder(*args, "--ensemble-mode", mode)
        assert cli.returncode == 0, cli.stderr
    registered["user"] = models.sklearn_for_ensemble(USER)
    models.log_serving_step(registered["user"].run_id, "clip", CLIP_STEP, CLIP_CODE)
    models.log_serving_step(registered["user"].run_id, "cap", CAP_STEP, CAP_CODE)
    registered["risk"] = models.sklearn_on_probabilities(RISK)
    models.log_serving_step(registered["user"].run_id, "risk", RISK_STEP, None)
    cli = builder("export", f"models:/{USER}@champion", "--repo", str(repo), "--ensemble")
    assert cli.returncode == 0, cli.stderr
    registered["typed"] = typed_exports(repo)
    with servers.serving(repo, triton_runtime, root / "tritonserver.log") as server:
        yield server, repo, registered


def typed_exports(repo: Path) -> dict[tuple[str, str], helpers.Typed]:
    """Each typed model registered once per mode, its run given the gateway's Feast tags (and
    the binary one a decision threshold), exported in-process with ``--ensemble``."""
    from mlflow import MlflowClient

    client, done = MlflowClient(), {}
    for kind, (factory, threshold) in TYPED.items():
        for mode in MODES:
            name = f"typed-{kind}-{mode}"
            trained = factory(name)
            run_id = client.get_model_version_by_alias(name, "champion").run_id
            for key, value in FEAST.items():
                client.set_tag(run_id, key, value)
            if threshold is not None:
                client.log_param(run_id, "decision_threshold", threshold)
            request = ExportRequest(f"models:/{name}@champion", repo, ensemble=True, ensemble_mode=mode)
            export_model(request)
            done[kind, mode] = trained
    return done


def typed_infer(
    server: TritonServer, model: str, fresh: Any, outputs: list[str]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``model``'s Triton config (as JSON) and its answers on ``fresh``, the inputs built from
    the config's ``serving.columns`` as the gateway builds them."""
    import json

    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    config = client.get_model_config(model, as_json=True)["config"]
    columns = json.loads(config["parameters"]["serving.columns"]["string_value"])
    inputs = []
    for column in columns:
        values = fresh[column["name"]].to_numpy().reshape(-1, 1)
        array = values.astype(object) if column["dtype"] == "string" else values.astype(column["dtype"])
        wire = {"string": "BYTES", "float32": "FP32", "int64": "INT64"}[column["dtype"]]
        inp = grpcclient.InferInput(column["name"], list(array.shape), wire)
        inp.set_data_from_numpy(array)
        inputs.append(inp)
    result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return config, {o: result.as_numpy(o) for o in outputs}


def text(values: np.ndarray) -> list[Any]:
    return [v.decode() if isinstance(v, bytes) else v.item() for v in values.ravel()]


def raw_rows(reg: models.Registered) -> np.ndarray:
    raw = reg.X.iloc[:48].to_numpy(dtype=np.float32).copy()
    raw[0] = np.nan  # an all-NaN row: every column imputed
    raw[1:4, :] = np.nan
    return raw


def test_steps_and_fused_answer_like_the_bare_model_and_the_reference(
    served: tuple[TritonServer, Path, dict[str, Any]],
) -> None:
    server, _, registered = served
    for mode, name in MODES.items():
        reg = registered[mode]
        raw = raw_rows(reg)
        spec = reg.extra["spec"]
        got = infer(server, f"{name}_ensemble", raw, ["probabilities", "score", "label"])
        features = transforms.preprocess(raw, spec["preprocess"])
        bare = infer(server, name, features, ["probabilities"])["probabilities"]
        post = {**spec["postprocess"], "threshold": reg.extra["threshold"]}  # the run's param
        score, label = transforms.postprocess(bare, post)
        np.testing.assert_array_equal(got["probabilities"], bare, err_msg=mode)
        np.testing.assert_array_equal(got["score"], score, err_msg=mode)
        np.testing.assert_array_equal(got["label"], label, err_msg=mode)
        assert got["score"].dtype == np.float32 and got["label"].dtype == np.int64


def test_every_generated_part_runs_on_onnxruntime_and_validates(
    served: tuple[TritonServer, Path, dict[str, Any]],
) -> None:
    import tritonclient.grpc as grpcclient

    server, repo, _ = served
    client = grpcclient.InferenceServerClient(server.grpc_url)
    steps = MODES["steps"]
    for model in (f"{steps}_preprocess", f"{steps}_postprocess", f"{MODES['fused']}_ensemble"):
        config = client.get_model_config(model).config
        assert config.backend == "onnxruntime", model
    ensemble = client.get_model_config(f"{steps}_ensemble").config
    assert ensemble.platform == "ensemble"
    fused = client.get_model_config(f"{MODES['fused']}_ensemble").config
    # The fused model is the ensemble's drop-in: the same serving contract for clients.
    assert {k for k in fused.parameters if k.startswith("serving.")} == {
        k for k in ensemble.parameters if k.startswith("serving.")
    }
    assert [o.name for o in fused.output] == ["probabilities", "score", "label"]
    check = builder("validate", "--repo", str(repo))
    assert check.returncode == 0, check.stdout + check.stderr


def test_ensemble_mode_without_ensemble_and_a_miswired_step_are_refused(
    mlflow_registry: str, tmp_path: Path
) -> None:
    lonely = models.sklearn_for_ensemble("lonely")
    cli = builder("export", "models:/lonely@champion", "--repo", str(tmp_path), "--ensemble-mode", "fused")
    assert cli.returncode != 0
    assert "--ensemble-mode needs --ensemble" in cli.stderr
    assert not any(tmp_path.iterdir())
    # The business rule reads the score as an integer: refused at export, naming step and tensor.
    wrong = {**CAP_STEP, "inputs": [{**CAP_STEP["inputs"][0], "data_type": "TYPE_INT64"}]}
    models.log_serving_step(lonely.run_id, "cap", wrong, CAP_CODE)
    cli = builder("export", "models:/lonely@champion", "--repo", str(tmp_path), "--ensemble")
    assert cli.returncode == 2
    lines = [line for line in cli.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: post step 'cap': input 'score' is TYPE_INT64 [1], but the generated")
    assert lines[1].startswith("hint:") and "Traceback" not in cli.stderr
    assert not any(tmp_path.iterdir())
    # A registered-model step naming a model the registry lacks: the registry's refusal (exit 3)
    # naming the step, before any conversion work (in-process: the CLI's path is shown above).
    models.log_serving_step(lonely.run_id, "cap", CAP_STEP, CAP_CODE)
    models.log_serving_step(lonely.run_id, "risk", {**RISK_STEP, "model": "models:/nobody@champion"}, None)
    with pytest.raises(RegistryError) as err:
        export_model(ExportRequest("models:/lonely@champion", tmp_path, ensemble=True))
    assert err.value.exit_code == 3
    assert err.value.message.startswith(
        "post step 'risk' (models:/nobody@champion): no registered model named 'nobody'"
    )
    assert not any(tmp_path.iterdir())


def test_the_runs_own_python_steps_are_wired_validated_and_served(
    served: tuple[TritonServer, Path, dict[str, Any]], tmp_path: Path
) -> None:
    import tritonclient.grpc as grpcclient

    server, repo, registered = served
    reg = registered["user"]
    raw = raw_rows(reg)
    raw[5:8] *= 40  # rows the clip step changes (amount, user_age_days beyond HIGH)
    got = infer(server, f"{USER}_ensemble", raw, USER_OUTPUTS)
    # Independently: clip, then the run's preprocessing, the bare model on Triton, the
    # threshold on the model's score, and the business rule's cap on the served score.
    clipped = np.clip(raw, LOW, HIGH)
    assert not np.array_equal(clipped, raw, equal_nan=True)
    features = transforms.preprocess(clipped, reg.extra["spec"]["preprocess"])
    bare = infer(server, USER, features, ["probabilities"])["probabilities"]
    positive = bare[:, 1:2]
    np.testing.assert_array_equal(got["probabilities"], bare)
    np.testing.assert_array_equal(
        got["label"], (positive >= np.float32(reg.extra["threshold"])).astype(np.int64)
    )
    np.testing.assert_array_equal(got["score"], np.minimum(positive, np.float32(CAP)))
    assert (positive > CAP).any(), "no score reached the cap: the test would not see the rule"
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for step in ("clip", "cap"):
        assert client.get_model_config(f"{USER}_{step}").config.backend == "python"
        assert (repo / f"{USER}_{step}" / str(reg.version) / "model.py").read_text() == (
            CLIP_CODE if step == "clip" else CAP_CODE
        )
    check = builder("validate", "--repo", str(repo))
    assert check.returncode == 0, check.stdout + check.stderr
    # A Python step cannot be fused into one ONNX graph: refused, naming the steps.
    fused = builder(
        "export",
        f"models:/{USER}@champion",
        "--repo",
        str(tmp_path),
        "--ensemble",
        "--ensemble-mode",
        "fused",
    )
    assert fused.returncode == 2
    assert "error: --ensemble-mode fused cannot fuse the run's serving step(s) clip (pre), cap (post)" in (
        fused.stderr
    )
    assert "hint: use --ensemble-mode steps" in fused.stderr
    assert not any(tmp_path.iterdir())


def test_a_registered_model_step_is_exported_and_served_after_the_model(
    served: tuple[TritonServer, Path, dict[str, Any]],
) -> None:
    import json

    import tritonclient.grpc as grpcclient

    server, repo, registered = served
    user, risk = registered["user"], registered["risk"]
    raw = raw_rows(user)
    got = infer(server, f"{USER}_ensemble", raw, USER_OUTPUTS)
    # Independently: the bare model on the clipped, preprocessed rows, then the registered
    # regressor run natively (scikit-learn) on its probabilities.
    features = transforms.preprocess(np.clip(raw, LOW, HIGH), user.extra["spec"]["preprocess"])
    bare = infer(server, USER, features, ["probabilities"])["probabilities"]
    native = risk.native.predict(pd.DataFrame(bare.astype(np.float64), columns=["p0", "p1"]))
    assert got["risk"].shape == (len(raw), 1) and got["risk"].dtype == np.float32
    np.testing.assert_allclose(got["risk"][:, 0], native, rtol=1e-5, atol=1e-5)
    assert np.ptp(native) > 0.5, "the regressor answers a constant: the test would not see it"
    # Its own ONNX model on onnxruntime, at the export's version, pinned by the ensemble; its
    # metadata names the model it came from and the export that wrote it.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.get_model_config(f"{USER}_risk").config.backend == "onnxruntime"
    meta = json.loads((repo / f"{USER}_risk" / str(user.version) / "metadata.json").read_text())
    assert (meta["source"]["registered_name"], meta["source"]["version"]) == (RISK, risk.version)
    assert (meta["export"]["registered_name"], meta["export"]["version"]) == (USER, user.version)
    assert meta["parity"]["rows"] > 0
    # (`builder validate` over the repository, this step included: the test above.)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind", list(TYPED))
def test_typed_models_get_post_only_ensembles_that_answer_like_the_bare_model(
    served: tuple[TritonServer, Path, dict[str, Any]], kind: str, mode: str
) -> None:
    from gateway.catalog import spec_from_config
    from gateway.responses import predictions

    server, repo, registered = served
    trained = registered["typed"][kind, mode]
    name, threshold = trained.name, TYPED[kind][1]
    fresh = trained.fresh
    _, bare = typed_infer(server, name, fresh, ["probabilities", "label"])
    outputs = ["probabilities", "score", "label"] if kind == "binary" else ["probabilities", "label"]
    config, got = typed_infer(server, f"{name}_ensemble", fresh, outputs)
    # The model's typed inputs, no preprocess step: the Pipeline's preprocessing is in its graph.
    assert {i["name"] for i in config["input"]} == set(fresh.columns)
    assert not (repo / f"{name}_preprocess").exists()
    np.testing.assert_array_equal(got["probabilities"], bare["probabilities"])
    probs, classes = bare["probabilities"], list(trained.native.classes_)
    if kind == "binary":
        np.testing.assert_array_equal(got["score"][:, 0], probs[:, 1])
        want = [classes[1] if p >= np.float32(threshold) else classes[0] for p in probs[:, 1]]
        assert want != text(bare["label"]), "the threshold changes no label: the test would not see it"
    else:
        want = [classes[i] for i in probs.argmax(axis=1)]
        assert want == text(bare["label"])  # the class by name, as the model's own label
    assert text(got["label"]) == want
    # The gateway reads the ensemble by the roles its parameters name, and answers the same.
    spec = spec_from_config(name, f"{name}_ensemble", "1", config, {"user_id": "int64"})
    _, answer = typed_infer(server, f"{name}_ensemble", fresh, list(spec.outputs))
    labels = [p.label for p in predictions(spec, answer, [False] * len(fresh))]
    assert labels == want
    # The drift reference rides with the ensemble: its inputs are the model's own.
    assert "drift.reference" in config["parameters"]
    # (`builder validate` over the whole repository, these included: the test above.)
