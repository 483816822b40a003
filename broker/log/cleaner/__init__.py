"""The log cleaner: compacts logs with cleanup.policy=compact to the last record of each key (Kafka's LogCleaner)."""
