"""The evidence every gateway replica shares (store.py): Redis in production, SQLite on one machine.

open.py picks the store from the settings; writer.py writes to it off the response path.
"""
