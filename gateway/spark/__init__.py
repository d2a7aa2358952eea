"""The gateway's offline commands on Spark (``--engine spark``), for payload logs no one machine
holds: ``gateway quality report`` (``quality.py``: the label join on Spark, the metrics by the
pandas engine's own code on the joined rows) and ``gateway skew-check`` (``skew.py``: the logged
rows joined point-in-time on Spark, compared by the pandas engine's rule). pyspark is the
``spark`` extra (``session.py`` refuses without it, naming it)."""
