"""The quality figures for Prometheus: labels by outcome, and the labels each replica accepted.

Both are counters of what *this* replica did (Prometheus sums them across replicas). The
metrics themselves (AUC, log loss, ...) are not exported per scrape: computing them over up to
50,000 pairs takes ~75 ms per version; ``GET /v1/models/{m}/quality`` computes them on demand,
from the shared store, and the fallback switch exports the one its rule judges
(``gateway_fallback_quality``, gateway/fallback/).
"""

from __future__ import annotations

from prometheus_client import Counter

FEEDBACK_LABELS = Counter(
    "gateway_feedback_labels",
    "Labels sent back, by outcome (accepted, duplicate, conflicting, unknown, expired, invalid)",
    ["model", "outcome"],
)
LABELED_ROWS = Counter(
    "gateway_quality_labeled_predictions",
    "Predictions given their label by this replica (each paired with every version that answered it)",
    ["model"],
)
