"""The client plane's network layer (Kafka's SocketServer: acceptor, processors, request channel).

Per connection a reader frames requests into one bounded request queue shared by a pool of handler tasks;
a writer sends the responses in request order, because clients pipeline and match responses by position
as much as by correlation id. A malformed frame closes only its own connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from kio.static.protocol import ResponsePayload

from broker.config import Listener
from broker.log.file_records import FileRegion
from broker.metrics.reservoir import SlidingReservoir
from broker.clientplane.protocol.api_versions import handle_api_versions
from broker.clientplane.protocol.codec import decode_request, encode_response
from broker.clientplane.protocol.errors import ProtocolError, UnsupportedVersion
from broker.clientplane.protocol.framing import FrameDecoder, frame_response
from broker.clientplane.protocol.messages import Request
from broker.clientplane.protocol.versions import ApiKey
from broker.clientplane.protocol.zero_copy import Part, ZeroCopyResponse, encode_zero_copy, parts_size

log = logging.getLogger(__name__)

# A handler answers a request with a kio response (or one whose record sets stay on disk until sent),
# or None when the client expects no answer (acks=0).
Handler = Callable[[Request, Listener], Awaitable["ResponsePayload | ZeroCopyResponse | Delayed | None"]]
_NO_RESPONSE = b""
_SIZE = struct.Struct(">i")


@dataclass
class Delayed:
    """A handler's answer that is not ready yet: ``future`` completes from a purgatory, then ``finish``
    turns its result into the response."""

    future: asyncio.Future
    finish: Callable[[object], ResponsePayload | ZeroCopyResponse | None]


class CloseConnectionError(Exception):
    """The handler wants the connection closed instead of an answer (an acks=0 produce that failed:
    Kafka closes the connection so the producer notices and refreshes its metadata)."""


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


@dataclass
class RequestMetrics:
    """Kafka's request metrics, by their names (kafka.network:type=RequestMetrics,name=...,request=...)."""

    requests: Counter = field(default_factory=Counter)           # RequestsPerSec (as a running total)
    errors: Counter = field(default_factory=Counter)             # ErrorsPerSec, failed requests only
    request_queue_time_ms: Counter = field(default_factory=Counter)   # RequestQueueTimeMs (sum)
    local_time_ms: Counter = field(default_factory=Counter)      # LocalTimeMs (sum)
    remote_time_ms: Counter = field(default_factory=Counter)     # RemoteTimeMs (sum: purgatory waits)
    response_send_time_ms: Counter = field(default_factory=Counter)   # ResponseSendTimeMs (sum)
    total_time_ms: Counter = field(default_factory=Counter)      # TotalTimeMs (sum)
    # RequestsPerSec{request,version} and ErrorsPerSec{request,error} as Kafka labels them
    requests_by_version: Counter = field(default_factory=Counter)    # (API, version)
    errors_by_code: Counter = field(default_factory=Counter)         # (API, error name), NONE included
    # the histograms behind the quantiles: (Kafka's metric name, API) -> count and latest samples
    times: dict[tuple[str, str], SlidingReservoir] = field(default_factory=dict)

    def record_time(self, metric: str, api: str, value_ms: float) -> None:
        reservoir = self.times.get((metric, api))
        if reservoir is None:
            reservoir = self.times[(metric, api)] = SlidingReservoir()
        reservoir.update(value_ms)


def response_error(response: object) -> str:
    """The error a response names at its top level (JoinGroup, Heartbeat, FindCoordinator, ...), else NONE.
    Kafka also counts the error codes of every partition inside a response; kafkasim does not walk them."""
    code = getattr(response, "error_code", None)
    if not isinstance(code, int):
        return "NONE"
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


@dataclass
class _InFlight:
    request: Request
    listener: Listener
    response: asyncio.Future
    received: float


class SocketServer:
    def __init__(self, listeners: list[Listener], handler: Handler, *, num_handlers: int = 8,
                 queued_max_requests: int = 500, max_request_bytes: int = 104857600) -> None:
        self.listeners = listeners
        self.handler = handler
        self.num_handlers = num_handlers
        self.max_request_bytes = max_request_bytes
        self.request_queue: asyncio.Queue[_InFlight] = asyncio.Queue(maxsize=queued_max_requests)
        self.metrics = RequestMetrics()
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: list[asyncio.Task] = []

    @property
    def request_queue_size(self) -> int:  # RequestQueueSize
        return self.request_queue.qsize()

    async def start(self) -> None:
        for listener in self.listeners:
            server = await asyncio.start_server(
                lambda r, w, lst=listener: self._serve_connection(r, w, lst),
                listener.bind_host, listener.port, reuse_address=True)
            self._servers.append(server)
        self._tasks = [asyncio.get_running_loop().create_task(self._handle_requests(), name=f"handler-{i}")
                       for i in range(self.num_handlers)]

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in self._tasks:
            task.cancel()

    # --- one connection -----------------------------------------------------------------------------

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                listener: Listener) -> None:
        peer = writer.get_extra_info("peername")
        # (response future, API name) in request order; None ends the connection
        responses: asyncio.Queue[tuple[asyncio.Future, str] | None] = asyncio.Queue()
        sender = asyncio.get_running_loop().create_task(self._send_responses(writer, responses, peer))
        decoder = FrameDecoder(self.max_request_bytes)
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    if not await self._accept_frame(frame, listener, responses, peer):
                        return
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except ConnectionError:
            pass
        finally:
            await responses.put(None)  # the sender finishes what was asked before closing
            await sender

    async def _accept_frame(self, frame: bytes, listener: Listener, responses: asyncio.Queue,
                            peer: object) -> bool:
        decoded = decode_request(frame)
        future = asyncio.get_running_loop().create_future()
        if isinstance(decoded, Request):
            await responses.put((future, api_name(decoded.header.api_key)))
            await self.request_queue.put(_InFlight(decoded, listener, future, time.monotonic()))
            return True
        header = decoded.header
        if isinstance(decoded, UnsupportedVersion) and header is not None and header.api_key == ApiKey.API_VERSIONS:
            # Too new an ApiVersions gets a v0 answer so the client can retry lower; never close here.
            future.set_result(encode_response(ApiKey.API_VERSIONS, 0, header.correlation_id,
                                              handle_api_versions(header)))
            await responses.put((future, api_name(header.api_key)))
            return True
        log.warning("closing connection from %s: %s", peer, decoded.reason)
        if header is not None:
            self.metrics.errors[api_name(header.api_key)] += 1
            self.metrics.errors_by_code[(api_name(header.api_key), "INVALID_REQUEST")] += 1
        return False

    async def _send_responses(self, writer: asyncio.StreamWriter, responses: asyncio.Queue, peer: object) -> None:
        try:
            while (queued := await responses.get()) is not None:
                future, name = queued
                try:
                    payload = await future
                except CloseConnectionError as exc:
                    log.info("closing connection from %s: %s", peer, exc)
                    return
                except Exception as exc:
                    log.error("closing connection from %s: the request failed: %r", peer, exc)
                    return
                if payload is _NO_RESPONSE:
                    continue
                started = time.monotonic()
                if isinstance(payload, list):
                    await self._send_parts(writer, payload)
                else:
                    writer.write(frame_response(payload))
                    await writer.drain()
                sent_ms = (time.monotonic() - started) * 1000
                self.metrics.response_send_time_ms[name] += sent_ms
                self.metrics.record_time("ResponseSendTimeMs", name, sent_ms)
        except ConnectionError:
            pass
        finally:
            writer.close()

    @staticmethod
    async def _send_parts(writer: asyncio.StreamWriter, parts: list[Part]) -> None:
        """Bytes are written, file regions go with sendfile straight from the segment files."""
        loop = asyncio.get_running_loop()
        writer.write(_SIZE.pack(parts_size(parts)))
        for part in parts:
            if not isinstance(part, FileRegion):
                writer.write(part)
                continue
            await writer.drain()
            # A private file description: sendfile moves the file offset, and the segment's own fd
            # must keep its offset for appends. /proc/self/fd also follows a segment renamed for deletion.
            with open(f"/proc/self/fd/{part.fd}", "rb") as file:
                sent = await loop.sendfile(writer.transport, file, part.position, part.size)
            if sent != part.size:
                raise ConnectionError(f"{part.path} shrank while being sent ({sent} of {part.size} bytes)")
        await writer.drain()

    # --- the handler pool ------------------------------------------------------------------------------

    async def _handle_requests(self) -> None:
        while True:
            item = await self.request_queue.get()
            dequeued = time.monotonic()
            try:
                response = await self.handler(item.request, item.listener)
            except Exception as exc:
                self._fail(item, exc)
                self._record(item, dequeued, time.monotonic(), None)
                continue
            local_done = time.monotonic()
            if isinstance(response, Delayed):
                # Parked in a purgatory: free this handler now; whoever completes the operation answers.
                response.future.add_done_callback(
                    lambda future, item=item, delayed=response, started=dequeued, local=local_done:
                    self._finish_delayed(item, delayed, future, started, local))
                continue
            self._answer(item, response)
            self._record(item, dequeued, local_done, None)

    def _finish_delayed(self, item: _InFlight, delayed: Delayed, future: asyncio.Future, dequeued: float,
                        local_done: float) -> None:
        try:
            response = delayed.finish(future.result())
        except Exception as exc:
            self._fail(item, exc)
        else:
            self._answer(item, response)
        self._record(item, dequeued, local_done, time.monotonic())

    def _answer(self, item: _InFlight, response: ResponsePayload | ZeroCopyResponse | None) -> None:
        header = item.request.header
        try:
            if response is None:
                payload: bytes | list[Part] = _NO_RESPONSE
            elif isinstance(response, ZeroCopyResponse):
                payload = encode_zero_copy(header.api_key, header.api_version, header.correlation_id, response)
            else:
                payload = encode_response(header.api_key, header.api_version, header.correlation_id, response)
        except Exception as exc:
            self._fail(item, exc)
            return
        self.metrics.errors_by_code[(api_name(header.api_key), response_error(response))] += 1
        item.response.set_result(payload)

    def _fail(self, item: _InFlight, exc: BaseException) -> None:
        header = item.request.header
        name = api_name(header.api_key)
        if not isinstance(exc, CloseConnectionError):
            log.error("%s v%d from %s failed", name, header.api_version, header.client_id, exc_info=exc)
        self.metrics.errors[name] += 1
        self.metrics.errors_by_code[(name, "UNKNOWN_SERVER_ERROR")] += 1
        item.response.set_exception(exc)

    def _record(self, item: _InFlight, dequeued: float, local_done: float, remote_done: float | None) -> None:
        header = item.request.header
        name = api_name(header.api_key)
        metrics = self.metrics
        finished = remote_done if remote_done is not None else local_done
        queue_ms = (dequeued - item.received) * 1000
        local_ms = (local_done - dequeued) * 1000
        remote_ms = (remote_done - local_done) * 1000 if remote_done is not None else 0.0
        total_ms = (finished - item.received) * 1000
        metrics.requests[name] += 1
        metrics.requests_by_version[(name, header.api_version)] += 1
        metrics.request_queue_time_ms[name] += queue_ms
        metrics.local_time_ms[name] += local_ms
        if remote_done is not None:
            metrics.remote_time_ms[name] += remote_ms
        metrics.total_time_ms[name] += total_ms
        # Kafka updates every histogram for every request: a request answered at once waited 0 ms remotely
        metrics.record_time("RequestQueueTimeMs", name, queue_ms)
        metrics.record_time("LocalTimeMs", name, local_ms)
        metrics.record_time("RemoteTimeMs", name, remote_ms)
        metrics.record_time("TotalTimeMs", name, total_ms)
