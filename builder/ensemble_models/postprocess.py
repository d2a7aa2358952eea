"""Triton Python-backend model: the ensemble's postprocess step (score and decision label).

Runs in Triton's model-execution environment; the decision threshold comes from the config's
``parameters { key: "spec" }``, written by ``builder export --ensemble`` from the MLflow run.
"""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transforms


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        # The version's own spec.json first: the config is shared by every version of the model,
        # and during an export the old version must keep its own parameters. Versions exported
        # before spec.json existed read the config's.
        own = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spec.json")
        if os.path.exists(own):
            with open(own) as fh:
                self.spec = json.load(fh)
        else:
            self.spec = json.loads(config["parameters"]["spec"]["string_value"])

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "probabilities").as_numpy() for r in requests]
        sizes = [len(a) for a in arrays]
        score, label = transforms.postprocess(np.concatenate(arrays), self.spec)
        bounds = np.cumsum(sizes)[:-1]
        responses = []
        for s, lab in zip(np.split(score, bounds), np.split(label, bounds), strict=False):
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("score", np.ascontiguousarray(s)),
                        pb_utils.Tensor("label", np.ascontiguousarray(lab)),
                    ]
                )
            )
        return responses
