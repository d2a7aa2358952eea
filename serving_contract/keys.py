"""Every key of the serving contract, named once (docs/serving-contract.md).

``builder export`` writes each fact twice: as a Triton config parameter (string values, read
through Triton's model-config API) and in the version's ``metadata.json``. A fact's parameter
key is its ``metadata.json`` path: ``serving.kind`` is ``metadata["serving"]["kind"]``; the
run's ``feast.*`` tags are parameters as they are and ``metadata["tags"]`` entries.
"""

from __future__ import annotations

from typing import Final

# metadata.json's sections that hold the contract
SERVING: Final = "serving"
TAGS: Final = "tags"

# The facts of metadata.json's ``serving`` section; each one's config parameter is
# ``serving.<fact>`` (``parameter``).
LAYOUT: Final = "layout"
COLUMNS: Final = "columns"
FEATURE_NAMES: Final = "feature_names"
KIND: Final = "kind"
CLASSES: Final = "classes"
OUTPUTS: Final = "outputs"
TARGETS: Final = "targets"
SCORE: Final = "score"
CLUSTERS: Final = "clusters"
DECISION_THRESHOLD: Final = "decision_threshold"
STRING_OPS: Final = "string_ops"
# The model's explainer (docs/explain.md): a JSON object with the fields below.
EXPLAINER: Final = "explainer"
FACTS: Final = (
    LAYOUT,
    COLUMNS,
    FEATURE_NAMES,
    KIND,
    CLASSES,
    OUTPUTS,
    TARGETS,
    SCORE,
    CLUSTERS,
    DECISION_THRESHOLD,
    STRING_OPS,
    EXPLAINER,
)
# A column of ``columns`` and the outlier ``score``'s fields.
COLUMN_NAME: Final = "name"
COLUMN_DTYPE: Final = "dtype"
SCORE_SOURCE: Final = "source"
SCORE_OUTLIER_BELOW: Final = "outlier_below"

# ``explainer``'s fields: the explainer model's name in the repository, its method
# (``tree_path_dependent`` or ``linear_interventional``), the units of the values (``log_odds``,
# ``probability``, ``raw``), what each of its outputs explains (a class label, or the
# prediction), and the names of its two output tensors (rows x columns x outputs, and rows x
# outputs); the columns are the contract's ``columns``, in that order.
EXPLAINER_MODEL: Final = "model"
EXPLAINER_METHOD: Final = "method"
EXPLAINER_UNITS: Final = "units"
EXPLAINER_OUTPUTS: Final = "outputs"
EXPLAINER_CONTRIBUTIONS: Final = "contributions"
EXPLAINER_BASE_VALUE: Final = "base_value"

_SERVING_PREFIX: Final = f"{SERVING}."


def parameter(fact: str) -> str:
    """The config parameter of a ``serving`` fact: ``kind`` -> ``serving.kind``."""
    return f"{_SERVING_PREFIX}{fact}"


def is_serving(key: str) -> bool:
    """Whether a config parameter is one of the ``serving.*`` ones."""
    return key.startswith(_SERVING_PREFIX)


# The run's Feast tags, copied into the config as they were logged (every ``feast.*`` tag);
# clients read these three.
FEAST_PREFIX: Final = "feast."
FEATURE_SERVICE: Final = "feast.feature_service"
ENTITY_KEYS: Final = "feast.entity_keys"
REQUEST_FIELDS: Final = "feast.request_fields"
FEAST_KEYS: Final = (FEATURE_SERVICE, ENTITY_KEYS, REQUEST_FIELDS)
# The service's features in training order (JSON), as the demo's training logs them; copied
# with the others, read by no client.
FEATURES: Final = "feast.features"

# Config parameters that describe one exported version rather than the model's contract: the
# export that wrote the config (``builder validate`` compares it with the version's
# metadata.json), the version's drift reference (docs/drift.md), and the champion a
# ``--keep-serving`` challenger is loaded beside (the version every gateway call names).
EXPORT_IDENTITY: Final = "builder.export_identity"
EXPORT_LABEL: Final = "builder.export"
DRIFT_REFERENCE: Final = "drift.reference"
CHAMPION_VERSION: Final = parameter("champion_version")
VERSION_PARAMETERS: Final = frozenset({EXPORT_IDENTITY, EXPORT_LABEL, DRIFT_REFERENCE, CHAMPION_VERSION})
# An explainer's own config parameter: the model and version it explains and that export's
# identity (JSON ``{model, version, identity}``), which ``builder validate`` compares with the
# model's config.
EXPLAINS: Final = "builder.explains"
EXPLAINS_MODEL: Final = "model"
EXPLAINS_VERSION: Final = "version"
EXPLAINS_IDENTITY: Final = "identity"
# The training run's tag asking every export of its model for an explainer (``true``/``false``;
# ``builder export --explain``/``--no-explain`` overrides it).
EXPLAIN_TAG: Final = "builder.explain"
