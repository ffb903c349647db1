"""``TransportRegistry``: the named transports of application commands.

Any :class:`~wow_core.transport.spi.Transport` can be a named transport: the in-memory
one, Kafka, Redis, NATS, or any plugin's. :meth:`TransportRegistry.from_settings` builds
one instance of the configured plugin per name (``WOW_APPLICATION__TRANSPORTS``); a
plugin name nobody registered is a :class:`~wow_core.settings.SettingsError` at
start-up. Asking for a name that is not configured is a
:class:`~wow_core.application.errors.TransportConfigurationError`, never a send error.
:func:`wow_core.transport_registry` does it from the process's own
settings and plugins, and ``async with`` starts the transports and closes them.

The topic of a named transport is ``<topic_prefix>application.<name>``, unless the
transport names its topics in a namespace of its own: a transport with an
``application_topic(name, topic_prefix)`` method (:class:`ApplicationTopicNaming`) names
it. The Redis transport puts ``WOW_REDIS__KEY_PREFIX`` before it, the Kafka transport
uses ``WOW_KAFKA__TOPIC_PREFIX`` when that is set, as they do for aggregate topics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

from wow_core.application.errors import TransportConfigurationError
from wow_core.application.settings import ApplicationSettings
from wow_core.settings import SettingsError, _check_name
from wow_core.transport.spi import Transport

if TYPE_CHECKING:
    from wow_core.plugins import PluginRegistry
    from wow_core.transport.settings import ProcessSettings

__all__ = ["ApplicationTopicNaming", "TransportRegistry"]

TOPIC_INFIX = "application."
VARIABLE = "WOW_APPLICATION__TRANSPORTS"


@runtime_checkable
class ApplicationTopicNaming(Protocol):
    """Optional, on a :class:`~wow_core.transport.spi.Transport`: how it names the topic of
    the application transport ``name``, given the messaging ``topic_prefix``.

    A transport whose aggregate topics live in a namespace of its own (a key prefix, a
    topic prefix of its own) puts its application topics there too. A transport without
    this method gets ``<topic_prefix>application.<name>``.
    """

    def application_topic(self, name: str, topic_prefix: str) -> str: ...


def default_application_topic(name: str, topic_prefix: str) -> str:
    """``<topic_prefix>application.<name>``: the topic of a transport that names none."""
    return f"{topic_prefix}{TOPIC_INFIX}{name}"


class TransportRegistry:
    """Named transports, and the topic of each (``<topic_prefix>application.<name>``, or
    what the transport names it: see :class:`ApplicationTopicNaming`)."""

    __slots__ = ("_topic_prefix", "_topics", "_transports")

    def __init__(self, transports: Mapping[str, Transport], *, topic_prefix: str = "wow.") -> None:
        checked: dict[str, Transport] = {}
        for name, transport in transports.items():
            if type(name) is not str:
                raise TransportConfigurationError(f"a transport name is a string, not {name!r}")
            try:
                _check_name(name)
            except ValueError as error:
                raise TransportConfigurationError(f"transport name {name!r}: {error}") from None
            if not isinstance(transport, Transport):
                raise TransportConfigurationError(
                    f"the transport {name!r} is a {type(transport).__qualname__}, not a wow_core Transport"
                )
            checked[name] = transport
        self._transports = checked
        self._topic_prefix = topic_prefix
        self._topics = {name: _topic_of(name, transport, topic_prefix) for name, transport in checked.items()}

    @classmethod
    def from_settings(cls, settings: ProcessSettings, plugins: PluginRegistry) -> TransportRegistry:
        """One instance of the configured plugin per name of ``WOW_APPLICATION__TRANSPORTS``."""
        from wow_core.plugins import UnknownPluginError

        section = settings.section("application", ApplicationSettings)
        transports: dict[str, Transport] = {}
        for name, plugin in section.transports.items():
            try:
                registration = plugins.get("transport", plugin)
            except UnknownPluginError:
                accepted = ", ".join(plugins.names("transport")) or "none"
                shown = json.dumps(dict(section.transports))
                raise SettingsError(
                    f"invalid settings:\n  {VARIABLE}={shown} is not accepted: "
                    f"the transport {name!r} names the plugin {plugin!r}, which no plugin registers; "
                    f"accepted: {accepted}"
                ) from None
            transport = registration.value(settings)
            if not isinstance(transport, Transport):
                raise TransportConfigurationError(
                    f"{registration.origin}: the transport factory {plugin!r} returned "
                    f"{type(transport).__qualname__}, not a Transport"
                )
            transports[name] = transport
        return cls(transports, topic_prefix=settings.messaging.topic_prefix)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def topic_prefix(self) -> str:
        """The messaging topic prefix (``WOW_MESSAGING__TOPIC_PREFIX``) topics are named with."""
        return self._topic_prefix

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._transports)

    def __contains__(self, name: object) -> bool:
        return name in self._transports

    def get(self, name: str) -> Transport:
        transport = self._transports.get(name)
        if transport is None:
            configured = ", ".join(sorted(self._transports)) or "none"
            raise TransportConfigurationError(
                f"no transport named {name!r} is configured ({VARIABLE}; configured: {configured})"
            )
        return transport

    def require(self, names: Iterable[str]) -> None:
        """Raise :class:`TransportConfigurationError` for the first name that is not configured."""
        for name in names:
            self.get(name)

    def topic(self, name: str) -> str:
        """The topic of the named transport (see :class:`ApplicationTopicNaming`)."""
        self.get(name)
        return self._topics[name]

    def _distinct(self) -> list[Transport]:
        seen: dict[int, Transport] = {}
        for transport in self._transports.values():
            seen.setdefault(id(transport), transport)
        return list(seen.values())

    async def start(self) -> None:
        for transport in self._distinct():
            await transport.start()

    async def close(self) -> None:
        errors: list[BaseException] = []
        for transport in self._distinct():
            try:
                await transport.close()
            except Exception as error:  # close every one, then report
                errors.append(error)
        if errors:
            raise errors[0]


def _topic_of(name: str, transport: Transport, topic_prefix: str) -> str:
    if isinstance(transport, ApplicationTopicNaming):
        topic = transport.application_topic(name, topic_prefix)
        if type(topic) is not str or not topic:
            raise TransportConfigurationError(
                f"the transport {name!r} ({type(transport).__qualname__}) named its topic {topic!r}"
            )
        return topic
    return default_application_topic(name, topic_prefix)
