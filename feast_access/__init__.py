"""Feast access the product shares: the gateway, the load tests, training and the skew check.

Any Feast repository, named by its path (the demo's is ``feature_repo/``, which only holds its
definitions, generator and profiles):

- ``store``: the profiles (``feature_store.yaml`` / ``feature_store.redis.yaml``), opening a
  store, ``apply`` and ``materialize``;
- ``service``: what a feature service serves (feature names and references, string features,
  join keys);
- ``training``: the offline rows and the training frame, the one point-in-time join that
  training, the skew check and the demo read.

This module imports no Feast: the constant below is named by code that never opens a store.
"""

from typing import Final

# Feast's entity-dataframe time column (the point-in-time join's "as of"), also the time column of
# the demo's sources and transactions.
EVENT_TIMESTAMP: Final = "event_timestamp"
