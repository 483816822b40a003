"""Cluster-plane gRPC schema (cluster.proto) and the code generated from it."""
