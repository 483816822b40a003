"""Network faults without Docker: each process of a cluster in its own Linux network namespace, and cuts made there."""
