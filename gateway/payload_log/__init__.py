"""The payload log: sampled feature rows and predictions, written asynchronously as Parquet."""
