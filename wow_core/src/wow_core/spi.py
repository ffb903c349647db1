"""The surface for plugin authors: what a transport, store or other plugin is built from.

::

    from wow_core.spi import Transport, TransportMessage, TransportReceiver, hookimpl

A transport implements :class:`Transport` (five members: ``name``, ``start``, ``send``,
``open``, ``close``; see ``docs/transports/spi.md`` for why the line is there) and may
derive from :class:`TransportBase`; its receivers implement :class:`TransportReceiver`
and yield :class:`TransportRecord` s, and may be built on the receiver kit
(:class:`Readiness`, :class:`ReadAhead`). A wait notifier implements
:class:`CommandWaitNotifier` (``kind``, ``start(sink)``, ``notify(endpoint, signal)``,
``close``) and carries :func:`encode_signal` text. What a transport may ask of the bus (its topic
naming, its decode-failure default) is the optional :class:`TransportDefaults`. A plugin
module marks its hooks with :data:`hookimpl`; a factory is called with the process's
settings (:class:`ProcessSettings`) and reads its own section, a :class:`SettingsSection`
(frozen, bounded, unknown fields refused) using the bounded types :data:`Count`,
:data:`Seconds`... Cross-cutting behaviour is a :class:`Middleware` whose hooks return
decorators (:class:`MessageBusDecorator` and its siblings) or observers
(:class:`LocalFirstObserver`, :class:`EventProcessingObserver`; ``docs/plugins/middleware.md``).
Nothing here imports the runtime.

The conformance suites every plugin runs are test classes in :mod:`wow_core.testing`
(``TransportConformance``, ``MessageBusConformance``, ``EventStoreConformance``), loaded
with pytest; they are not imported from here. Users' services import from
:mod:`wow_core`. Importing this module is cheap: each name is imported on first use.
"""

from __future__ import annotations

from wow_core._lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING (see wow_core/__init__.py)

if TYPE_CHECKING:
    from wow_core.command.endpoint import WaitEndpoint
    from wow_core.command.notifier import CommandWaitNotifier, WaitSignalSink
    from wow_core.command.signal_wire import SignalDecodeError, decode_signal, encode_signal
    from wow_core.command.stages import WaitSignal
    from wow_core.context import ContextCapture
    from wow_core.event.failure import FailureRecorder
    from wow_core.event.observer import EventProcessingObserver
    from wow_core.eventsourcing.store import EventStore, SnapshotRepository
    from wow_core.messaging.contract import BusClosedError
    from wow_core.messaging.local_first.observer import LocalFirstObserver, SendRoute
    from wow_core.metrics import Metrics
    from wow_core.middleware import (
        BusLayer,
        CommandGatewayDecorator,
        CommandHandlerDecorator,
        DecodeFailureHandlerDecorator,
        EventStoreDecorator,
        LocalMessageBusDecorator,
        MessageBusDecorator,
        Middleware,
        MiddlewareFactory,
    )
    from wow_core.plugins.hookspecs import Factory, TransportFactory, WaitNotifierFactory, hookimpl
    from wow_core.settings import Count, Name, NonNegativeSeconds, Seconds, SettingsError, SettingsSection
    from wow_core.transport.base import TransportBase
    from wow_core.transport.decode_failure import (
        DecodeFailure,
        DecodeFailureAction,
        TransportDecodeFailureHandler,
    )
    from wow_core.transport.defaults import (
        DecodeFailureDefault,
        DefaultTopicNaming,
        TopicNaming,
        TransportDefaults,
    )
    from wow_core.transport.kit import ReadAhead, Readiness
    from wow_core.transport.settings import ProcessSettings
    from wow_core.transport.spi import Transport, TransportMessage, TransportReceiver, TransportRecord

_EXPORTS = {
    # transports
    "Transport": "wow_core.transport.spi",
    "TransportReceiver": "wow_core.transport.spi",
    "TransportRecord": "wow_core.transport.spi",
    "TransportMessage": "wow_core.transport.spi",
    "TransportBase": "wow_core.transport.base",
    "TransportDefaults": "wow_core.transport.defaults",
    "TopicNaming": "wow_core.transport.defaults",
    "DefaultTopicNaming": "wow_core.transport.defaults",
    "DecodeFailureDefault": "wow_core.transport.defaults",
    "BusClosedError": "wow_core.messaging.contract",
    # the receiver kit
    "Readiness": "wow_core.transport.kit",
    "ReadAhead": "wow_core.transport.kit",
    # decode-failure policies
    "TransportDecodeFailureHandler": "wow_core.transport.decode_failure",
    "DecodeFailure": "wow_core.transport.decode_failure",
    "DecodeFailureAction": "wow_core.transport.decode_failure",
    # the other SPIs a plugin may implement
    "EventStore": "wow_core.eventsourcing.store",
    "SnapshotRepository": "wow_core.eventsourcing.store",
    "FailureRecorder": "wow_core.event.failure",
    "Metrics": "wow_core.metrics",
    "ContextCapture": "wow_core.context",
    # wait notifiers (signals of waited-for commands between processes)
    "CommandWaitNotifier": "wow_core.command.notifier",
    "WaitSignalSink": "wow_core.command.notifier",
    "WaitEndpoint": "wow_core.command.endpoint",
    "WaitSignal": "wow_core.command.stages",
    "encode_signal": "wow_core.command.signal_wire",
    "decode_signal": "wow_core.command.signal_wire",
    "SignalDecodeError": "wow_core.command.signal_wire",
    # hooks
    "hookimpl": "wow_core.plugins.hookspecs",
    "Factory": "wow_core.plugins.hookspecs",
    "TransportFactory": "wow_core.plugins.hookspecs",
    "WaitNotifierFactory": "wow_core.plugins.hookspecs",
    # settings
    "ProcessSettings": "wow_core.transport.settings",
    "SettingsSection": "wow_core.settings",
    "SettingsError": "wow_core.settings",
    "Count": "wow_core.settings",
    "Seconds": "wow_core.settings",
    "Name": "wow_core.settings",
    "NonNegativeSeconds": "wow_core.settings",
    # middleware (wow_core.middleware)
    "Middleware": "wow_core.middleware",
    "MiddlewareFactory": "wow_core.middleware",
    "BusLayer": "wow_core.middleware",
    "MessageBusDecorator": "wow_core.middleware",
    "LocalMessageBusDecorator": "wow_core.middleware",
    "CommandGatewayDecorator": "wow_core.middleware",
    "CommandHandlerDecorator": "wow_core.middleware",
    "EventStoreDecorator": "wow_core.middleware",
    "DecodeFailureHandlerDecorator": "wow_core.middleware",
    "LocalFirstObserver": "wow_core.messaging.local_first.observer",
    "SendRoute": "wow_core.messaging.local_first.observer",
    "EventProcessingObserver": "wow_core.event.observer",
}

__all__ = [
    "Transport",
    "TransportReceiver",
    "TransportRecord",
    "TransportMessage",
    "TransportBase",
    "TransportDefaults",
    "TopicNaming",
    "DefaultTopicNaming",
    "DecodeFailureDefault",
    "BusClosedError",
    "Readiness",
    "ReadAhead",
    "TransportDecodeFailureHandler",
    "DecodeFailure",
    "DecodeFailureAction",
    "EventStore",
    "SnapshotRepository",
    "FailureRecorder",
    "Metrics",
    "ContextCapture",
    "CommandWaitNotifier",
    "WaitSignalSink",
    "WaitEndpoint",
    "WaitSignal",
    "encode_signal",
    "decode_signal",
    "SignalDecodeError",
    "hookimpl",
    "Factory",
    "TransportFactory",
    "WaitNotifierFactory",
    "ProcessSettings",
    "SettingsSection",
    "SettingsError",
    "Count",
    "Seconds",
    "Name",
    "NonNegativeSeconds",
    "Middleware",
    "MiddlewareFactory",
    "BusLayer",
    "MessageBusDecorator",
    "LocalMessageBusDecorator",
    "CommandGatewayDecorator",
    "CommandHandlerDecorator",
    "EventStoreDecorator",
    "DecodeFailureHandlerDecorator",
    "LocalFirstObserver",
    "SendRoute",
    "EventProcessingObserver",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
