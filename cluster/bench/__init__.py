"""Benches: one registry of everything kafkasim measures, one report, one command (``kafkasim bench NAME``)."""
