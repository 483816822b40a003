"""The client plane: Kafka's SocketServer (`network`), the sans-IO protocol codec (`protocol/`), KafkaApis and
one handler module per client API family (`handlers/`)."""
