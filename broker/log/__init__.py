"""A partition replica's on-disk log: Kafka-format segments, indexes, recovery, retention and checkpoints."""
