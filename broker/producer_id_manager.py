"""Producer ids unique across the cluster, claimed from ZooKeeper in blocks, as Kafka 2.x's ProducerIdManager
(core/src/main/scala/kafka/coordinator/transaction/ProducerIdManager.scala).

Every broker claims ``PID_BLOCK_SIZE`` ids at a time by a compare-and-set on ``/latest_producer_id_block``,
which holds the block claimed last; it then hands them out from memory.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo.exceptions import BadVersionError, NodeExistsError

from zk.client import ZkClient
from zk.znodes import ProducerIdBlock, ProducerIdBlockZNode, ZNodeDecodeError

log = logging.getLogger(__name__)

PID_BLOCK_SIZE = 1000  # ProducerIdManager.PidBlockSize
LONG_MAX = 2**63 - 1


class ProducerIdAllocationError(RuntimeError):
    """No producer id can be handed out: the block znode is unreadable or every id has been used."""


def next_block(current: ProducerIdBlock | None, broker_id: int) -> ProducerIdBlock:
    """The block after ``current`` (the first block when none was claimed yet), claimed by ``broker_id``."""
    if current is None:
        return ProducerIdBlock(broker=broker_id, block_start=0, block_end=PID_BLOCK_SIZE - 1)
    if current.block_end > LONG_MAX - PID_BLOCK_SIZE:
        raise ProducerIdAllocationError(
            f"every producer id up to {current.block_end} has been claimed; no 64-bit producer id is left")
    return ProducerIdBlock(broker=broker_id, block_start=current.block_end + 1,
                           block_end=current.block_end + PID_BLOCK_SIZE)


class ProducerIdManager:
    def __init__(self, broker_id: int, zk: ZkClient) -> None:
        self.broker_id = broker_id
        self._zk = zk
        self._lock = asyncio.Lock()  # one claim at a time, and no id handed out twice within this broker
        self._block: ProducerIdBlock | None = None
        self._next_id = 0

    async def start(self) -> None:
        """Claim the first block at broker start-up, as Kafka does: a producer that starts while ZooKeeper is
        away still gets its id from the block in hand."""
        async with self._lock:
            if self._block is None:
                self._block = await self._claim_block()
                self._next_id = self._block.block_start

    @property
    def current_block(self) -> ProducerIdBlock | None:
        return self._block

    async def generate_producer_id(self) -> int:
        """A producer id no broker of the cluster has handed out before."""
        async with self._lock:
            if self._block is None or self._next_id > self._block.block_end:
                self._block = await self._claim_block()
                self._next_id = self._block.block_start
            producer_id = self._next_id
            self._next_id += 1
            return producer_id

    async def _claim_block(self) -> ProducerIdBlock:
        while True:
            data, stat = await self._zk.get_or_none(ProducerIdBlockZNode.path)
            try:
                current = ProducerIdBlockZNode.decode(data)
            except ZNodeDecodeError as exc:
                raise ProducerIdAllocationError(
                    f"{exc}; write Kafka's JSON there, e.g. "
                    '{"version":1,"broker":0,"block_start":"0","block_end":"<an id above every producer id in '
                    'use>"}, to let brokers hand out producer ids again') from None
            block = next_block(current, self.broker_id)
            try:
                if stat is None:
                    await self._zk.create(ProducerIdBlockZNode.path, ProducerIdBlockZNode.encode(block))
                else:
                    await self._zk.set(ProducerIdBlockZNode.path, ProducerIdBlockZNode.encode(block), stat.version)
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed a block since we read: read its block and claim the next
            log.info("broker %d claimed producer ids [%d, %d] (znode version %d)", self.broker_id,
                     block.block_start, block.block_end, -1 if stat is None else stat.version + 1)
            return block
