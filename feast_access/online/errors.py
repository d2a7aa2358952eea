"""The direct readers' errors: one tree, each a one-line message.

A read's other failures keep their own types, as the Feast SDK's did, so a caller that already
translates them (gateway/features.py) needs nothing new: a key the store cannot hold is a
ValueError or TypeError (the request's fault), a store that is down an OSError (redis) or
``sqlite3.Error``.
"""

from __future__ import annotations


class OnlineReadError(Exception):
    """Base of the direct readers' own errors."""


class Unservable(OnlineReadError):
    """The compile step refuses a service the direct readers cannot serve as Feast does (an
    on-demand or stream view, an unknown store, a value type they do not decode): the caller
    keeps the Feast SDK's read for it."""


class LayoutError(OnlineReadError):
    """The spec or the store is not in a layout the readers know (another Feast, a missing
    table, a value encoding they do not decode): raised at open, or at the read that meets it."""


class StoreConfigError(OnlineReadError):
    """The online store's configuration asks for what the readers do not do (Redis over TLS, a
    cluster, an unknown connection parameter)."""


class StoreError(OnlineReadError):
    """The online store answered with an error (a Redis error reply: NOAUTH, WRONGTYPE, ...)."""
