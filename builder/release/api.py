"""The names KServe's API and this project's annotations give things: the one module every
release module reads them from (so that none imports another only for a constant)."""

import re

GROUP = "serving.kserve.io"
VERSION = "v1beta1"
PLURAL = "inferenceservices"
KIND = "InferenceService"
API_VERSION = f"{GROUP}/{VERSION}"

DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
TAG_ROUTING = "serving.kserve.io/enable-tag-routing"
# Which model version a revision serves, readable with `kubectl get isvc -o yaml`.
MODEL_ANNOTATION = "triton-stack/model"
MODEL_VERSION_ANNOTATION = "triton-stack/model-version"


def canary_name(version: str) -> str:
    """The canary predictor's name for a model version: ``v`` + the version as a DNS label."""
    return "v" + re.sub(r"[^a-z0-9]+", "-", version.lower()).strip("-")
