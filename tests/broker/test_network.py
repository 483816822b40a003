"""The client-plane SocketServer on a real loopback socket: request metrics under Kafka's names, and
responses in request order even when an earlier request is answered later from a purgatory."""

import asyncio
import struct

from broker.config import Listener
from broker.clientplane.network import Delayed, SocketServer
from broker.clientplane.protocol.api_versions import handle_api_versions
from zk.server import free_port


def api_versions_frame(correlation_id: int, api_key: int = 18) -> bytes:
    client_id = b"net-test"
    payload = struct.pack(">hhih", api_key, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(payload)) + payload


async def read_correlation_id(reader: asyncio.StreamReader) -> int:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    body = await reader.readexactly(size)
    return struct.unpack(">i", body[:4])[0]


async def serve(handler):
    server = SocketServer([Listener("PLAINTEXT", "127.0.0.1", free_port())], handler)
    await server.start()
    port = server.listeners[0].port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return server, reader, writer


def test_every_request_is_counted_with_its_queue_local_send_and_total_time():
    async def handler(request, listener):
        return handle_api_versions(request.header, request.body)

    async def run():
        server, reader, writer = await serve(handler)
        try:
            writer.write(b"".join(api_versions_frame(i) for i in range(1, 4)))
            assert [await read_correlation_id(reader) for _ in range(3)] == [1, 2, 3]
            metrics = server.metrics
            assert metrics.requests["API_VERSIONS"] == 3 and metrics.errors["API_VERSIONS"] == 0
            for timing in (metrics.request_queue_time_ms, metrics.local_time_ms, metrics.response_send_time_ms,
                           metrics.total_time_ms):
                assert "API_VERSIONS" in timing
            assert server.request_queue_size == 0
        finally:
            writer.close()
            await server.stop()
    asyncio.run(run())


def test_a_parked_request_is_answered_before_the_ones_sent_after_it():
    async def run():
        release = asyncio.get_running_loop().create_future()

        async def handler(request, listener):
            answer = handle_api_versions(request.header, request.body)
            if request.header.correlation_id == 1:
                return Delayed(release, lambda _: answer)  # waits, like an acks=all produce
            return answer

        server, reader, writer = await serve(handler)
        try:
            writer.write(api_versions_frame(1) + api_versions_frame(2))
            # the second request is handled while the first is parked, yet nothing is sent out of order
            await asyncio.wait_for(_until(lambda: server.metrics.requests["API_VERSIONS"] == 1), 5)
            release.set_result(None)
            assert [await read_correlation_id(reader) for _ in range(2)] == [1, 2]
            assert server.metrics.remote_time_ms["API_VERSIONS"] > 0
        finally:
            writer.close()
            await server.stop()
    asyncio.run(run())


def test_an_unknown_api_key_closes_its_connection_and_counts_an_error():
    async def handler(request, listener):
        raise AssertionError("never reached")

    async def run():
        server, reader, writer = await serve(handler)
        try:
            writer.write(api_versions_frame(1, api_key=999))
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert server.metrics.errors["999"] == 1
        finally:
            writer.close()
            await server.stop()
    asyncio.run(run())


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)
