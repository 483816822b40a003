"""Replication: Partition (leader/follower state, HW, ISR rules), ReplicaManager and its role changes, replica
fetchers, ISR change proposals, truncation by leader epoch, delayed produce/fetch, idempotent-producer state,
and the cluster-plane services that carry control requests and replica fetches."""
