"""TransportBase: the bookkeeping every transport client repeats, written once.

A :class:`~wow_core.transport.Transport` implementation may derive from it (the in-memory,
Redis and NATS transports do); the SPI stays a protocol, so deriving is a convenience,
never a requirement. What it holds: the topic naming and the decode-failure default the
transport asks of the bus (the optional
:class:`~wow_core.transport.defaults.TransportDefaults`), a ``closed`` flag that makes
``send``/``open`` refuse work with :class:`~wow_core.messaging.BusClosedError`, and the
set of receivers the transport opened and has not seen close. What it does not do:
connect, send, open or close anything; how its receivers are closed (one by one,
concurrently, errors kept or raised) stays with the transport, which documents it.
"""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

from wow_core.messaging.contract import BusClosedError
from wow_core.transport.defaults import DecodeFailureDefault, TopicNaming

R = TypeVar("R")
"""The transport's receiver type."""


class TransportBase(Generic[R]):
    """Naming, decode-failure default, closed flag and open receivers of a transport.

    ``label`` names the transport in the error raised after close (``"the NATS
    transport is closed"``). ``closed`` turns true when :meth:`_mark_closed` runs and
    never back.
    """

    label: ClassVar[str] = "transport"

    def __init__(self, naming: TopicNaming, decode_failure_default: DecodeFailureDefault) -> None:
        self._naming = naming
        self._decode_failure_default = decode_failure_default
        self._receivers: set[R] = set()
        self._closed = False

    @property
    def naming(self) -> TopicNaming:
        return self._naming

    @property
    def decode_failure_default(self) -> DecodeFailureDefault:
        return self._decode_failure_default

    @property
    def closed(self) -> bool:
        """True once ``close`` began; sends and opens are refused from then on."""
        return self._closed

    def _check_open(self) -> None:
        """Raise :class:`~wow_core.messaging.BusClosedError` once closed."""
        if self._closed:
            raise self._closed_error()

    def _closed_error(self, topic: str | None = None) -> BusClosedError:
        """The error of a refused call, naming ``topic`` when there is one."""
        where = f"; cannot send to {topic!r}" if topic is not None else ""
        return BusClosedError(f"the {self.label} transport is closed{where}")

    def _mark_closed(self) -> bool:
        """Mark the transport closed; False when it already was (``close`` is idempotent)."""
        if self._closed:
            return False
        self._closed = True
        return True

    def _track(self, receiver: R) -> R:
        """Remember ``receiver`` as open; returns it."""
        self._receivers.add(receiver)
        return receiver

    def receiver_closed(self, receiver: R) -> None:
        """A receiver reports its close: it is no longer the transport's to close."""
        self._receivers.discard(receiver)

    def _open_receivers(self) -> list[R]:
        """A snapshot of the open receivers (closing one changes the set)."""
        return list(self._receivers)
