"""The Feast feature repository of the fraud demo: definitions, a data generator and store helpers."""
