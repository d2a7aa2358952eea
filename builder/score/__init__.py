"""``builder score``: batch scoring with the graph Triton serves, on Spark (docs/batch.md).

An entity table (keys, an as-of timestamp, the request-time fields) gets the model's feature
service's features by Feast's point-in-time rule (``feast_access/spark_join.py``, over the
views' offline sources, read through ``feast_access.offline``), then the exported version's own
``model.onnx`` from the Triton repository (``served.py``: same files, same version, its export
identity) runs in onnxruntime on the executors (``executor.py``: one session per Python worker,
Arrow batches); the answers are read by the serving contract's roles as the gateway reads
Triton's (``answers.py``). The output is written to a temporary path and renamed
(``output.py``); on a sample, the answers can be checked against a live Triton and a live
gateway first (``check.py``). ``run.py`` holds the steps together.

pyspark is the ``spark`` extra (``session.py`` refuses without it, naming it).
"""
