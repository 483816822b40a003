"""The group tests share one 3-broker cluster per module, as the client tests do."""

from tests.client.conftest import shared_cluster

__all__ = ["shared_cluster"]
