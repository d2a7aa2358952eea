"""Labels from a Feast feature view: the view's value for each logged row's entity at the row's
log time (``--labels-feature-view VIEW --feature-repo DIR``).

Feast's point-in-time join (``FeatureStore.get_historical_features``) does it: the entity frame
is the log's join keys with ``__log_timestamp`` as its event time, so each row gets the latest
label value at or before its prediction (within the view's TTL). Rows without a value are
simply unlabeled, not ``unknown``: there is no label to have failed to join. Feast loads only
when this option is used.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from feast_access import EVENT_TIMESTAMP
from gateway.payload_log.layout import LOG_TIMESTAMP
from gateway.quality.offline import LABEL, ROW, Labels, OfflineError


class FeatureViewLabels:
    """A LabelSource (gateway/quality/offline.py) reading one feature view of a Feast repo."""

    def __init__(self, repo: Path, view: str, field: str = LABEL) -> None:
        from feast import FeatureStore

        try:
            self.store = FeatureStore(repo_path=str(repo))
            found = self.store.get_feature_view(view)
        except Exception as exc:  # Feast raises its own tree and plain errors for a bad repo
            raise OfflineError(f"no feature view {view!r} in the Feast repo {repo}: {exc}") from None
        if field not in {f.name for f in found.features}:
            names = [f.name for f in found.features]
            raise OfflineError(
                f"feature view {view!r} has no feature {field!r} (it has {names}): pass --label-field"
            )
        self.view, self.field, self.source = view, field, f"Feast feature view {view}:{field} ({repo})"
        self._keys = tuple(c.name for c in found.entity_columns)

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    def for_log(self, log: pd.DataFrame) -> Labels:
        """The view's label of each logged row (only rows that have one)."""
        entities = log[list(self._keys)].copy()
        entities[EVENT_TIMESTAMP] = pd.to_datetime(log[LOG_TIMESTAMP], utc=True)
        entities[ROW] = log.index
        entities = entities[entities[list(self._keys)].notna().all(axis=1)]
        try:
            job = self.store.get_historical_features(
                entity_df=entities, features=[f"{self.view}:{self.field}"]
            )
            frame = job.to_df()
        except Exception as exc:  # the offline store's own errors (a missing source file, a bad type)
            raise OfflineError(
                f"Feast could not read {self.view}:{self.field} for the log's rows: {exc}"
            ) from None
        frame = frame[frame[self.field].notna()].sort_values(ROW)
        labels = pd.DataFrame(
            {
                ROW: frame[ROW].to_numpy(),
                LABEL: frame[self.field].to_numpy(),
                **{k: frame[k] for k in self._keys},
            }
        )
        return Labels(labels.reset_index(drop=True), self.source, "feature view", self._keys)
