"""Triton Python-backend model: the ensemble's preprocess step.

Runs in Triton's model-execution environment (numpy<2), not the project's: it imports only
numpy and the ``transforms.py`` copied beside it. Its parameters (imputation, scaling) come
from the config's ``parameters { key: "spec" }``, written by ``builder export --ensemble``.
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
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]

    def execute(self, requests):
        # One numpy pass over the rows of every request the batcher grouped, then split back.
        arrays = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        sizes = [len(a) for a in arrays]
        out = transforms.preprocess(np.concatenate(arrays), self.spec)
        responses = []
        for part in np.split(out, np.cumsum(sizes)[:-1]):
            tensor = pb_utils.Tensor(self.output_name, np.ascontiguousarray(part))
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses
