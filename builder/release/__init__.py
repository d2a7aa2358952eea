"""Rolling a model version out on KServe: an InferenceService canary, then promote or roll back.

``manifest`` renders the InferenceService and the patches (pure data), ``schema`` checks them
against KServe's CRD, ``kube`` talks to the API server through the official ``kubernetes``
client, and ``rollout`` sequences apply -> wait for the new revision -> promote | rollback.
``builder release ...`` (``builder/cli/release.py``) is the command line over these.

KServe's canary, in two deployment modes (``modes``; ``--mode serverless|standard|auto``):
Serverless: ``spec.predictor.canaryTrafficPercent`` splits traffic between the last revision
rolled out at 100 % and the newest ready one; promote removes the field, rollback sets it to 0.
With the annotation ``serving.kserve.io/enable-tag-routing: "true"`` the newest revision is also
reachable alone at its ``latest-`` host, which the release gate load-tests. Standard (KServe >=
0.20): a ``spec.canary`` entry named ``v<version>`` with its own Deployment and Service
(``standard``); promote makes it the stable predictor, rollback drops it.
"""
