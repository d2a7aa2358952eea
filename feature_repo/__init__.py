"""The Feast repository of the fraud demo: definitions, a data generator and two profiles.

Code opens it, as any Feast repository, through feast_access/ with the path below; product code
never imports this package (the gateway takes the repository's path, ``--feature-repo``).
"""

from pathlib import Path

REPO_PATH = Path(__file__).resolve().parent
SERVICE = "fraud_v1"  # the demo's feature service (definitions.fraud_v1), the fraud models' inputs
