"""The SQLite store, the system of record, and its typed rows."""
