"""The broker process: Kafka-protocol server, replica manager, partitions, log, purgatory, metadata cache."""
