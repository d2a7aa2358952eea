"""Online feature reads without the Feast SDK in the serving process (issue 33).

Two steps:

- ``compile`` (imports Feast; run once, at deploy time): a feature service read from Feast's
  registry into a ``ServiceSpec`` (``spec``), a small JSON file, or a one-line ``Unservable``
  refusal for what the direct readers cannot serve as Feast does;
- ``open_reader`` (``reader``; imports neither Feast, pandas nor pyarrow): the spec's online
  store read directly, in Feast's own layout: ``sqlite`` (its table), ``redis`` (its hash, one
  pipelined round trip per request, hiredis).

The layout the readers depend on, the Feast versions they know and the parity suite that holds
them to Feast: docs/feature-reads.md.

This module imports nothing: ``compile`` must not be pulled into the serving process.
"""
