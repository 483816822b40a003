"""Kafka's replication failure stories (kafka-internals.md 3.10) replayed against real broker processes."""
