"""The Locust users. Importing this package imports Locust (and patches the process with
gevent): only the Locust subprocess and the smoke-test scripts may import it, never the gate."""
