"""The CRITICAL switch to a fallback model (switch.py) and its Prometheus figures (prom.py)."""
