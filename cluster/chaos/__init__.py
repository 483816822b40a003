"""kafkasim chaos: the workload history, the seeded nemesis schedule, the checker and Kafka's replication matrix."""
