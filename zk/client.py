"""A typed asyncio client over kazoo.

kazoo runs its own thread. Every result and every watch is handed to the owning asyncio loop with
``call_soon_threadsafe``; nothing here touches broker or controller state from kazoo's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NodeExistsError, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat

log = logging.getLogger(__name__)

__all__ = [
    "CheckOp",
    "CreateOp",
    "DeleteOp",
    "MultiOpError",
    "NoNodeError",
    "NodeExistsError",
    "SessionEvent",
    "SetDataOp",
    "WatchedEvent",
    "ZkClient",
    "ZkUnavailableError",
    "ZnodeStat",
    "connected",
]


class ZkUnavailableError(RuntimeError):
    """ZooKeeper could not be reached within the connection timeout."""


class SessionEvent(Enum):
    DISCONNECTED = "disconnected"      # connection lost, session may still be alive
    RECONNECTED = "reconnected"        # same session back
    EXPIRED = "expired"                # session gone: ephemerals deleted, watches lost
    NEW_SESSION = "new_session"        # connected again with a new session after expiry


@dataclass(frozen=True)
class CheckOp:
    path: str
    version: int


@dataclass(frozen=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclass(frozen=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int = -1


Op = CheckOp | CreateOp | SetDataOp | DeleteOp


class MultiOpError(Exception):
    """A multi-op failed as a whole; ``failed_index`` names the op ZooKeeper refused and ``cause`` why."""

    def __init__(self, failed_index: int, cause: Exception, ops: list[Op]) -> None:
        super().__init__(f"multi-op failed at op {failed_index} ({ops[failed_index]}): {cause!r}")
        self.failed_index = failed_index
        self.cause = cause
        self.ops = ops


@contextlib.asynccontextmanager
async def connected(connect: str, session_timeout_ms: int = 6000, connection_timeout_ms: int = 5000,
                    say: Callable[[str], None] | None = None) -> AsyncIterator[ZkClient]:
    """A short-lived session for tools and tests: start, use, close."""
    zk = ZkClient(connect, session_timeout_ms, connection_timeout_ms)
    await zk.start(say=say or (lambda _: None))
    try:
        yield zk
    finally:
        await zk.close()


def split_chroot(connect: str) -> tuple[str, str]:
    """``host:port,host:port/chroot`` -> (hosts, "/chroot" or "")."""
    slash = connect.find("/")
    if slash < 0:
        return connect, ""
    return connect[:slash], connect[slash:].rstrip("/")


class ZkClient:
    def __init__(self, connect: str, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kazoo: KazooClient | None = None
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._watch_wrappers: dict[Callable[[WatchedEvent], Any], Callable[[WatchedEvent], None]] = {}
        self._expired = False

    # --- life cycle ---------------------------------------------------------------------------------

    async def start(self, say: Callable[[str], None] | None = None) -> None:
        """Connect, retrying with a message until the connection timeout, and create a missing chroot."""
        self._loop = asyncio.get_running_loop()
        say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
        hosts, chroot = split_chroot(self.connect)
        if chroot:
            await self._loop.run_in_executor(None, self._ensure_chroot, hosts, chroot, say)
        self._kazoo = KazooClient(hosts=self.connect, timeout=self.session_timeout_ms / 1000,
                                  connection_retry={"max_tries": -1, "max_delay": 1})
        self._kazoo.add_listener(self._on_kazoo_state)
        await self._loop.run_in_executor(None, self._start_with_retries, self._kazoo, say)

    def _start_with_retries(self, client: KazooClient, say: Callable[[str], None]) -> None:
        import time

        deadline = time.monotonic() + self.connection_timeout_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            try:
                client.start(timeout=min(1.0, max(0.2, deadline - time.monotonic())))
                return
            except KazooTimeoutError:
                client.stop()
                if time.monotonic() >= deadline:
                    client.close()
                    raise ZkUnavailableError(
                        f"ZooKeeper at {self.connect} did not answer within "
                        f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}: start it "
                        f"(kafkasim zookeeper) or fix zookeeper.connect") from None
                say(f"waiting for ZooKeeper at {self.connect} (attempt {attempt}) ...")

    def _ensure_chroot(self, hosts: str, chroot: str, say: Callable[[str], None]) -> None:
        client = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000)
        self._start_with_retries(client, say)
        try:
            client.ensure_path(chroot)
        finally:
            client.stop()
            client.close()

    async def close(self) -> None:
        if self._kazoo is None:
            return
        kazoo, self._kazoo = self._kazoo, None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, kazoo.stop)
        await loop.run_in_executor(None, kazoo.close)

    @property
    def session_id(self) -> int | None:
        if self._kazoo is None or self._kazoo.client_id is None:
            return None
        return self._kazoo.client_id[0]

    def add_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        """``listener`` runs on the asyncio loop."""
        self._session_listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's thread: translate and hand over, nothing else.
        if state == KazooState.LOST:
            self._expired = True
            event = SessionEvent.EXPIRED
        elif state == KazooState.SUSPENDED:
            event = SessionEvent.DISCONNECTED
        elif self._expired:
            self._expired = False
            event = SessionEvent.NEW_SESSION
        else:
            event = SessionEvent.RECONNECTED
        if self._loop is not None and not self._loop.is_closed():
            for listener in self._session_listeners:
                self._loop.call_soon_threadsafe(listener, event)

    # --- bridging kazoo's async results into asyncio ---------------------------------------------------

    def _client(self) -> KazooClient:
        if self._kazoo is None:
            raise ZkUnavailableError("the ZooKeeper client is not started")
        return self._kazoo

    def _await(self, async_result: Any) -> asyncio.Future:
        loop = self._loop
        assert loop is not None
        future = loop.create_future()

        def settle(result: Any) -> None:
            if future.done():
                return
            if result.successful():
                future.set_result(result.value)
            else:
                future.set_exception(result.exception)

        async_result.rawlink(lambda result: loop.call_soon_threadsafe(settle, result))
        return future

    async def _request(self, send: Callable[[KazooClient], Any]) -> Any:
        """Kafka's retryRequestsUntilConnected: a request lost with its connection is sent again. While kazoo
        reconnects it queues requests, so the next try waits for the connection; an expired session or a
        closed client ends the tries with its own error."""
        while True:
            try:
                return await self._await(send(self._client()))
            except ConnectionLoss:
                await asyncio.sleep(0.05)

    def _watcher(self, handler: Callable[[WatchedEvent], Any] | None) -> Callable[[WatchedEvent], None] | None:
        """One stable wrapper per handler, so re-arming a watch does not stack duplicates in kazoo."""
        if handler is None:
            return None
        wrapper = self._watch_wrappers.get(handler)
        if wrapper is None:
            loop = self._loop
            assert loop is not None

            def wrapper(event: WatchedEvent, _handler=handler) -> None:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(_handler, event)

            self._watch_wrappers[handler] = wrapper
        return wrapper

    # --- operations ---------------------------------------------------------------------------------

    async def get(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None
                  ) -> tuple[bytes, ZnodeStat]:
        return await self._request(lambda kazoo: kazoo.get_async(path, watch=self._watcher(watch)))

    async def get_or_none(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None
                          ) -> tuple[bytes, ZnodeStat] | tuple[None, None]:
        try:
            return await self.get(path, watch)
        except NoNodeError:
            if watch is not None:  # keep watching for the node to appear
                await self.exists(path, watch)
            return None, None

    async def exists(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> ZnodeStat | None:
        return await self._request(lambda kazoo: kazoo.exists_async(path, watch=self._watcher(watch)))

    async def get_children(self, path: str, watch: Callable[[WatchedEvent], Any] | None = None) -> list[str]:
        return await self._request(lambda kazoo: kazoo.get_children_async(path, watch=self._watcher(watch)))

    async def get_children_or_empty(self, path: str) -> list[str]:
        try:
            return await self.get_children(path)
        except NoNodeError:
            return []

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        return await self._request(lambda kazoo: kazoo.create_async(
            path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath))

    async def ensure_path(self, path: str) -> None:
        try:
            await self.create(path, b"", makepath=True)
        except NodeExistsError:
            pass

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        return await self._request(lambda kazoo: kazoo.set_async(path, data, version))

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if recursive:
            for child in await self.get_children(path):
                await self.delete(f"{path}/{child}", recursive=True)
        await self._request(lambda kazoo: kazoo.delete_async(path, version))

    async def multi(self, ops: list[Op]) -> list[Any]:
        """All ops or none. Raises MultiOpError naming the op that ZooKeeper refused."""
        def commit(kazoo: KazooClient) -> Any:
            transaction = kazoo.transaction()
            for op in ops:
                if isinstance(op, CheckOp):
                    transaction.check(op.path, op.version)
                elif isinstance(op, CreateOp):
                    transaction.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
                elif isinstance(op, SetDataOp):
                    transaction.set_data(op.path, op.data, op.version)
                else:
                    transaction.delete(op.path, op.version)
            return transaction.commit_async()

        results = await self._request(commit)
        for index, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise MultiOpError(index, result, ops)
        if any(isinstance(result, KazooException) for result in results):
            raise MultiOpError(0, results[0], ops)
        return results
