"""Prometheus metrics of one broker, named as Kafka's JMX metrics look through the Prometheus JMX exporter."""
