"""A TCP relay between one ZooKeeper client and the server, for tests that take one client's connection (and, held
long enough, its session) away while every other client keeps its own."""

from __future__ import annotations

import asyncio


class ZooKeeperLink:
    """A TCP relay between one broker's ZooKeeper client and the server, whose connections can be cut, so that
    one client loses its connection (not its session) while everybody else keeps theirs."""

    def __init__(self, server: str) -> None:
        host, port = server.split(":")
        self.upstream = (host, int(port))
        self.port = 0
        self.cut_off = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers |= {writer, up_writer}

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def cut(self) -> None:
        self.cut_off = True
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
