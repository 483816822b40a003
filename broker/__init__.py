"""The broker process: the client plane, replication, the log, purgatories and the group coordinator."""
