"""The transaction coordinator (Kafka's kafka.coordinator.transaction): transactional ids on __transaction_state."""
