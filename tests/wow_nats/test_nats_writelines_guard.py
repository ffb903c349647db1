"""A write to a socket transport whose connection is lost leaves nothing in the selector.

CPython 3.12 and 3.13 (cpython#136234) buffered such a ``writelines`` and registered a
writer for the socket about to close: the next socket given its file descriptor was never
woken for writing (a NATS reconnect, or any connection made meanwhile, waited out its
connect timeout). :mod:`wow_nats.connection` drops these writes, as ``write`` does.
"""

from __future__ import annotations

import asyncio
import socket

import wow_nats.connection  # noqa: F401  (applies the guard)


async def test_writelines_after_an_abort_registers_no_writer_for_the_closed_socket() -> None:
    ours, peer = socket.socketpair()
    try:
        _, writer = await asyncio.open_connection(sock=ours)
        fd = ours.fileno()
        writer.transport.abort()
        writer.writelines([b"PUB a 1\r\n", b"x\r\n"])
        await asyncio.sleep(0)  # connection_lost runs: the socket is closed
        assert ours.fileno() == -1
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        assert fd not in selector.get_map(), "a writer left for a closed descriptor"
    finally:
        peer.close()
