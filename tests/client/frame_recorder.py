"""Real clients' request frames, recorded on the wire: a TCP proxy in front of a one-broker cluster that advertises
the proxy's address on its client listener, so every connection a client opens (bootstrap, then the addresses
Metadata and FindCoordinator give) passes through it. The proxy forwards bytes both ways untouched and keeps a copy
of every request frame (without its size prefix), by API key."""

from __future__ import annotations

import socket
import struct
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

_SIZE = struct.Struct(">i")


class FrameRecorder:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self.frames: dict[int, list[bytes]] = defaultdict(list)
        self._lock = threading.Lock()
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._stopped = threading.Event()
        self._accepting = threading.Thread(target=self._accept, name="frame-recorder", daemon=True)

    def start(self) -> FrameRecorder:
        self._accepting.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close(sock)

    def recorded(self) -> dict[int, list[bytes]]:
        with self._lock:
            return {key: list(frames) for key, frames in self.frames.items()}

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                _close(client)
                continue
            broker.settimeout(None)
            with self._lock:
                self._sockets += [client, broker]
            threading.Thread(target=self._requests, args=(client, broker), daemon=True).start()
            threading.Thread(target=_pipe, args=(broker, client), daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket) -> None:
        """Client to broker: cut the stream into frames, keep each, pass it on."""
        buffer = b""
        try:
            while chunk := client.recv(65536):
                broker.sendall(chunk)
                buffer += chunk
                while len(buffer) >= 4:
                    size = _SIZE.unpack_from(buffer)[0]
                    if len(buffer) < 4 + size:
                        break
                    frame, buffer = buffer[4:4 + size], buffer[4 + size:]
                    if len(frame) >= 2:
                        with self._lock:
                            self.frames[struct.unpack_from(">h", frame)[0]].append(frame)
        except OSError:
            pass
        finally:
            _close(client)
            _close(broker)


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(source)
        _close(target)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@contextmanager
def recording(upstream_port: int) -> Iterator[FrameRecorder]:
    recorder = FrameRecorder(upstream_port).start()
    try:
        yield recorder
    finally:
        recorder.stop()
