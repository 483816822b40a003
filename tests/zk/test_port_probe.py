"""The port probe behind `kafkasim up`'s busy-port check, on real loopback sockets."""

from __future__ import annotations

import socket

from zk.server import port_is_free


def listener(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as every listener of the cluster binds
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_listening_port_is_busy():
    with listener() as held:
        assert not port_is_free("127.0.0.1", held.getsockname()[1])


def test_a_port_whose_closed_connections_linger_in_time_wait_is_free_again():
    server = listener()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first, so its end of the connection waits in TIME_WAIT
    client.recv(1)
    client.close()
    server.close()
    assert port_is_free("127.0.0.1", port)
    with listener(port):  # and a new listener does bind it, as the restarted broker will
        assert not port_is_free("127.0.0.1", port)
