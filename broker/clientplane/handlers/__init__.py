"""Client-plane request handlers, one module per API family; KafkaApis dispatches to them."""
