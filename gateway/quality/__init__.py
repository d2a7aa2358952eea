"""Model quality: predictions paired with labels (the truth, often days later), per version.

- live.py: ``QualityMonitor``, an Observer (gateway/observe.py) that remembers each answer by
  its prediction id, takes labels through ``feedback`` and reports windows (``report``);
- feedback.py: the feedback body (``parse_feedback``), its items and outcomes;
- contract.py: how a version's answers and labels are scored (kind, classes, threshold);
- metrics.py: the metrics, pure functions, and which way each is better (the release gate);
- prom.py: the Prometheus counter and collector;
- offline.py, feast_labels.py, html.py, cli.py: ``gateway quality report``, the payload log
  joined with labels from a file or a Feast feature view.

docs/quality.md says what is computed and how labels join.
"""
