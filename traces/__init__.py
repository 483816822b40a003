"""Typed, schema-versioned trace events and the non-blocking JSON-lines writer every process uses."""
