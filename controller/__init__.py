"""The controller: election, cached cluster state, partition and replica state machines, one serial event queue."""
