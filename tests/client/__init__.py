"""Unmodified Kafka clients (confluent-kafka, kafka-python, kcat) against real broker processes."""
