"""The rule every control request passes first: drop it when it comes from a deposed controller or
was addressed to an earlier incarnation of this broker (KIP-380). Pure."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


def check_control_request(request_controller_epoch: int, highest_controller_epoch_seen: int,
                          request_broker_epoch: int, current_broker_epoch: int) -> ErrorCode:
    if request_controller_epoch < highest_controller_epoch_seen:
        return ErrorCode.stale_controller_epoch
    # -1 means the controller did not know our epoch: accepted, as Kafka does.
    if request_broker_epoch != -1 and request_broker_epoch < current_broker_epoch:
        return ErrorCode.stale_broker_epoch
    return ErrorCode.none
