"""ZooKeeper: znode paths and payload models (Kafka 2.x JSON), a typed client over kazoo, a local server launcher."""
