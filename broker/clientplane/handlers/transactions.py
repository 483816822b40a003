"""The transaction APIs a producer with a transactional.id uses: FindCoordinator with key type 1 (creating the
internal __transaction_state topic on first use), InitProducerId (also without a transactional id: an idempotent
producer's id), AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, answered by the TransactionCoordinator of the broker
leading the id's __transaction_state partition. PRODUCER_FENCED is sent as INVALID_PRODUCER_EPOCH to versions
that predate it (InitProducerId < 4, the others < 2)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.access import TxnAccess
from broker.clientplane.handlers.common import NO_THROTTLE, answer_once, millis, response_module
from broker.clientplane.handlers.find_coordinator import (
    InternalTopic,
    answer_coordinator,
    coordinator_response,
    create_internal_topic,
)
from broker.clientplane.network import Delayed
from broker.clientplane.protocol.build import build
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.config import Listener
from broker.transaction.coordinator import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

FIRST_INIT_PRODUCER_ID_VERSION_WITH_FENCED = 4
FIRST_VERSION_WITH_FENCED = 2  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn


def fenced_for(version: int, first_with_fenced: int, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced and version < first_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return error


async def ensure_transaction_state_topic(txns: TxnAccess) -> tuple[ErrorCode, str]:
    """Create __transaction_state with transaction.state.log.num.partitions and .replication.factor, once that many
    brokers are alive (find_coordinator.py), with TransactionStateManager.transactionTopicConfigs' settings:
    compacted, unclean election off, min.insync.replicas = transaction.state.log.min.isr as configured (a min.isr
    above the replication factor stores no transaction, NOT_ENOUGH_REPLICAS, as in Kafka: the broker says so).
    Clients are answered COORDINATOR_NOT_AVAILABLE meanwhile and retry."""
    config = txns.config
    if config.transaction_state_log_min_isr > config.transaction_state_log_replication_factor:
        log.warning("transaction.state.log.min.isr %d is above transaction.state.log.replication.factor %d: "
                    "%s will refuse every transaction (NOT_ENOUGH_REPLICAS); lower the min.isr",
                    config.transaction_state_log_min_isr, config.transaction_state_log_replication_factor,
                    TRANSACTION_STATE_TOPIC)
    return await create_internal_topic(txns.zk, InternalTopic(
        TRANSACTION_STATE_TOPIC, "transactions state topic", config.transaction_state_log_num_partitions,
        config.transaction_state_log_replication_factor, "transaction.state.log.replication.factor", {
            "cleanup.policy": "compact",
            "min.insync.replicas": str(config.transaction_state_log_min_isr),
            "segment.bytes": str(config.transaction_state_log_segment_bytes),
            "unclean.leader.election.enable": "false"}))


async def handle_find_transaction_coordinator(txns: TxnAccess, request: Request, listener: Listener):
    key = request.body.key
    version = request.header.api_version
    if not key:
        return coordinator_response(version, ErrorCode.invalid_request, "a transactional id must not be empty")
    return await answer_coordinator(version, txns.metadata_cache, TRANSACTION_STATE_TOPIC,
                                    txns.coordinator.partition_of(key), listener,
                                    lambda: ensure_transaction_state_topic(txns))


async def handle_init_producer_id(txns: TxnAccess, request: Request):
    body = request.body
    version = request.header.api_version
    module = response_module(ApiKey.INIT_PRODUCER_ID, version)

    def answer(error: ErrorCode, producer_id: int, producer_epoch: int):
        return build(module.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                     error_code=fenced_for(version, FIRST_INIT_PRODUCER_ID_VERSION_WITH_FENCED, error),
                     producer_id=producer_id, producer_epoch=producer_epoch)

    if body.transactional_id is None:
        return answer(ErrorCode.none, await txns.producer_ids.generate_producer_id(), 0)
    coordinator = txns.coordinator
    # The coordinator hands out a new producer id for a new transactional id or an exhausted epoch; claiming one may
    # wait on ZooKeeper, so it is claimed first, and the coordinator then runs without a pause.
    spare: int | None = None
    while True:
        txn = coordinator.transactions.get(body.transactional_id)
        if (txn is None or txn.is_epoch_exhausted()) and spare is None \
                and coordinator.coordinator_error(body.transactional_id) is None:
            spare = await txns.producer_ids.generate_producer_id()
            continue
        break

    def new_producer_id() -> int:
        if spare is None:
            raise RuntimeError("no producer id was claimed for this InitProducerId")
        return spare

    expected = None
    if getattr(body, "producer_id", -1) != -1:
        expected = (body.producer_id, body.producer_epoch)
    future, respond = answer_once(asyncio.get_running_loop())
    coordinator.handle_init_producer_id(body.transactional_id, millis(body.transaction_timeout), expected,
                                        new_producer_id, lambda *result: respond(result))
    if future.done():
        return answer(*future.result())
    return Delayed(future, lambda result: answer(*result))


async def handle_add_partitions_to_txn(txns: TxnAccess, request: Request):
    body = request.body
    version = request.header.api_version
    module = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    topics = [(t.name, tuple(t.partitions)) for t in body.v3_and_below_topics]
    partitions = [(name, p) for name, ps in topics for p in ps]
    known = txns.metadata_cache.partitions
    unknown = {tp for tp in partitions if tp not in known}

    def answer(errors: dict[tuple[str, int], ErrorCode]):
        return build(module.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=tuple(
            build(module.AddPartitionsToTxnTopicResult, name=name, results_by_partition=tuple(
                build(module.AddPartitionsToTxnPartitionResult, partition_index=p,
                      partition_error_code=fenced_for(version, FIRST_VERSION_WITH_FENCED, errors[(name, p)]))
                for p in ps))
            for name, ps in topics))

    if unknown:
        # Kafka refuses the whole request: the known partitions are not attempted
        return answer({tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                       else ErrorCode.operation_not_attempted for tp in partitions})
    future, respond = answer_once(asyncio.get_running_loop())
    txns.coordinator.handle_add_partitions(body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                                           body.v3_and_below_producer_epoch, partitions, respond)

    def finish(error: ErrorCode):
        return answer(dict.fromkeys(partitions, error))
    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


def answer_txn_error(request: Request, api_key: ApiKey, response_name: str,
                     call: Callable[[Callable[[ErrorCode], None]], None]):
    """AddOffsetsToTxn's and EndTxn's answer: the one error ``call`` hands the coordinator's callback, at once or
    after the coordinator's __transaction_state append, with PRODUCER_FENCED as INVALID_PRODUCER_EPOCH before v2."""
    version = request.header.api_version
    response_class = getattr(response_module(api_key, version), response_name)
    future, respond = answer_once(asyncio.get_running_loop())
    call(respond)

    def finish(error: ErrorCode):
        return build(response_class, throttle_time=NO_THROTTLE,
                     error_code=fenced_for(version, FIRST_VERSION_WITH_FENCED, error))
    if future.done():
        return finish(future.result())
    return Delayed(future, finish)


async def handle_add_offsets_to_txn(txns: TxnAccess, request: Request):
    body = request.body
    return answer_txn_error(request, ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxnResponse",
                            lambda respond: txns.coordinator.handle_add_offsets(
                                body.transactional_id, body.producer_id, body.producer_epoch, body.group_id, respond))


async def handle_end_txn(txns: TxnAccess, request: Request):
    body = request.body
    return answer_txn_error(request, ApiKey.END_TXN, "EndTxnResponse",
                            lambda respond: txns.coordinator.handle_end_txn(
                                body.transactional_id, body.producer_id, body.producer_epoch, body.committed, respond))
