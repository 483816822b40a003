"""Sans-IO core of the client plane: Kafka request framing, decoding and encoding with kio, ApiVersions rules."""
