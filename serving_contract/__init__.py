"""The serving contract: what ``builder export`` records about an exported model so that every
client (the gateway, the load tests, the MLflow deployments plugin, the demo) builds its
requests and reads the answers by role (docs/serving-contract.md).

One place names every key (``keys``) and converts both ways between the typed
``ServingContract`` and its two written forms: the Triton config's ``parameters`` and the
version's ``metadata.json``. The builder writes through it and every client reads through it.

Standard library only, and no import of the project's other packages: builder, gateway,
loadtests, support and tools all import it (tests/unit/test_code_shape.py holds that wall),
and it ships in the gateway image.
"""

from serving_contract import keys
from serving_contract.contract import ServingContract, feast_tags, serving_parameters
from serving_contract.types import (
    CLASSIFIERS,
    DTYPES,
    KINDS,
    LAYOUTS,
    ROLES,
    ClassLabel,
    Column,
    ContractError,
    Dtype,
    Explainer,
    Kind,
    Layout,
    OutlierScore,
    OutputRoles,
    names,
)

__all__ = [
    "CLASSIFIERS",
    "DTYPES",
    "KINDS",
    "LAYOUTS",
    "ROLES",
    "ClassLabel",
    "Column",
    "ContractError",
    "Dtype",
    "Explainer",
    "Kind",
    "Layout",
    "OutlierScore",
    "OutputRoles",
    "ServingContract",
    "feast_tags",
    "keys",
    "names",
    "serving_parameters",
]
