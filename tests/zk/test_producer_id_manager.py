"""Producer id blocks claimed through a real ZooKeeper, as Kafka 2.x brokers do."""

import asyncio
import contextlib
import json

import pytest

from broker.producer_id_manager import PID_BLOCK_SIZE, ProducerIdAllocationError, ProducerIdManager
from tests.harness import zk_call
from zk.client import connected
from zk.znodes import ProducerIdBlock, ProducerIdBlockZNode

pytestmark = pytest.mark.processes


def test_three_brokers_allocating_concurrently_never_share_an_id_or_a_block(zk_connect):
    per_broker = 2_500

    async def body():
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(connected(zk_connect, connection_timeout_ms=10000))
                       for _ in range(3)]
            managers = [ProducerIdManager(broker_id, zk) for broker_id, zk in enumerate(clients, start=1)]
            ids = await asyncio.gather(*(
                asyncio.gather(*(manager.generate_producer_id() for _ in range(per_broker)))
                for manager in managers))
            data, stat = await clients[0].get(ProducerIdBlockZNode.path)
            return ids, data, stat.version
    ids, data, version = asyncio.run(body())

    every_id = [producer_id for broker_ids in ids for producer_id in broker_ids]
    assert len(set(every_id)) == 3 * per_broker
    owners = {}
    for broker_id, broker_ids in enumerate(ids, start=1):
        for producer_id in broker_ids:
            assert owners.setdefault(producer_id // PID_BLOCK_SIZE, broker_id) == broker_id
    assert len(owners) == 9 and max(every_id) < 9 * PID_BLOCK_SIZE  # 3 blocks each, none skipped
    latest = json.loads(data)
    assert set(latest) == {"version", "broker", "block_start", "block_end"}
    assert latest["version"] == 1 and latest["broker"] in (1, 2, 3)
    assert (latest["block_start"], latest["block_end"]) == ("8000", "8999")
    assert version == 8  # created with the first block, then one successful write per further block


def test_concurrent_callers_in_one_broker_get_consecutive_ids_from_its_block(zk_connect):
    async def body(zk):
        manager = ProducerIdManager(1, zk)
        ids = await asyncio.gather(*(manager.generate_producer_id() for _ in range(1_500)))
        return sorted(ids), manager.current_block
    ids, block = zk_call(zk_connect, body)
    assert ids == list(range(1_500))
    assert block == ProducerIdBlock(broker=1, block_start=1000, block_end=1999)


def test_the_empty_znode_created_at_start_up_yields_the_first_block(zk_connect):
    async def body(zk):
        await zk.create(ProducerIdBlockZNode.path, b"")
        producer_id = await ProducerIdManager(4, zk).generate_producer_id()
        data, stat = await zk.get(ProducerIdBlockZNode.path)
        return producer_id, data, stat.version
    producer_id, data, version = zk_call(zk_connect, body)
    assert producer_id == 0 and version == 1
    assert data == b'{"version":1,"broker":4,"block_start":"0","block_end":"999"}'


def test_a_broker_continues_after_the_block_another_broker_claimed(zk_connect):
    async def body(zk):
        claimed = ProducerIdBlock(broker=5, block_start=3000, block_end=3999)
        await zk.create(ProducerIdBlockZNode.path, ProducerIdBlockZNode.encode(claimed))
        return await ProducerIdManager(1, zk).generate_producer_id()
    assert zk_call(zk_connect, body) == 4000


def test_a_corrupt_block_znode_stops_allocation_with_a_message_naming_it(zk_connect):
    async def body(zk):
        await zk.create(ProducerIdBlockZNode.path, b'{"version":1,"broker":1,"block_start":0.5}')
        await ProducerIdManager(1, zk).generate_producer_id()
    with pytest.raises(ProducerIdAllocationError) as info:
        zk_call(zk_connect, body)
    assert "/latest_producer_id_block" in str(info.value) and "block_end" in str(info.value)
