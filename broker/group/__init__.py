"""The group coordinator: consumer group state machine (pure), the __consumer_offsets record formats, and the
manager that stores groups and offsets as replicated records and loads them when leadership moves."""
