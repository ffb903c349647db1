"""The asynchronous marker and how it is read.

``@asynchronous(transport="payments")`` on a command class says: a dispatch of this
command in the default execution mode is queued on the named transport, and a worker
bound to that transport executes it. The marker belongs to the class it decorates: a
subclass is not asynchronous unless it is marked itself (its payload would not be the
same shape).

The producer's :class:`~wow_core.application.middleware.TransportMiddleware` and the
:class:`~wow_core.application.worker.CommandWorker` read it through the same
:class:`CommandMetadataProvider`; :class:`ReflectionCommandMetadataProvider` reads the
decorator, and a custom provider can answer from anywhere else (a table, a setting).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from wow_core.settings import _check_name

__all__ = [
    "Asynchronous",
    "CommandMetadata",
    "CommandMetadataProvider",
    "ReflectionCommandMetadataProvider",
    "asynchronous",
]

MARKER_ATTRIBUTE = "__wow_asynchronous__"

C = TypeVar("C", bound=type[Any])


@dataclass(frozen=True, slots=True)
class Asynchronous:
    """The marker: the name of the transport this command is queued on."""

    transport: str


def asynchronous(*, transport: str) -> Callable[[C], C]:
    """Class decorator: dispatches of this command are queued on ``transport``."""
    if type(transport) is not str:
        raise TypeError(f"the transport of @asynchronous is a name, not {transport!r}")
    try:
        _check_name(transport)
    except ValueError as error:
        raise ValueError(f"@asynchronous(transport={transport!r}): {error}") from None

    def mark(cls: C) -> C:
        if not isinstance(cls, type):
            raise TypeError(f"@asynchronous decorates a command class, not {cls!r}")
        setattr(cls, MARKER_ATTRIBUTE, Asynchronous(transport))
        return cls

    return mark


@dataclass(frozen=True, slots=True)
class CommandMetadata:
    """What the pipeline knows of a command class: the transport it is queued on, if any."""

    transport: str | None = None

    @property
    def is_asynchronous(self) -> bool:
        return self.transport is not None


SYNCHRONOUS = CommandMetadata()


@runtime_checkable
class CommandMetadataProvider(Protocol):
    def metadata_of(self, command_class: type[Any]) -> CommandMetadata: ...


class ReflectionCommandMetadataProvider:
    """Reads ``@asynchronous`` from the class itself (not from its bases)."""

    __slots__ = ()

    def metadata_of(self, command_class: type[Any]) -> CommandMetadata:
        marker = vars(command_class).get(MARKER_ATTRIBUTE) if isinstance(command_class, type) else None
        if isinstance(marker, Asynchronous):
            return CommandMetadata(marker.transport)
        return SYNCHRONOUS
