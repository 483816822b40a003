"""Trace analysis on PySpark (schema, jobs, notebook)."""
