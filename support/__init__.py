"""What the tests, the benchmarks, the demo and ``builder tune`` share: starting real servers
(``servers``), training and registering models (``models``, ``train``) and driving closed-loop
load (``load``). Installed with the project, so nothing outside ``tests/`` imports ``tests``;
no pytest here, so a benchmark or ``builder tune`` can import it. It must not import
``builder.tune`` (which imports it)."""
