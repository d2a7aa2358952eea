"""The statistics the gateway's monitors share: a version's reference bins (``reference``), binning
served or logged values into them and keeping the counts in time windows (``counts``), and the
measures of a window against the reference, PSI first (``measures``). The live drift monitor
(gateway/drift/), the shadow comparison (gateway/shadow/), the payload log's report
(gateway/payload_log/) and the quality reports' windows (gateway/quality/) read through here, so
each figure is computed one way wherever it is shown."""
