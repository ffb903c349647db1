"""The Transport SPI, TransportMessageBus with its three buses, and the in-memory transport."""

from wow_core.transport.base import TransportBase
from wow_core.transport.bus import (
    TransportCommandBus,
    TransportDomainEventBus,
    TransportMessageBus,
    TransportStateEventBus,
)
from wow_core.transport.decode_failure import (
    DeadLetterReason,
    DeadLetterSender,
    DecodeFailure,
    DecodeFailureAction,
    DecodeFailureObserver,
    DefaultDecodeFailureHandler,
    TransportDecodeFailureHandler,
)
from wow_core.transport.defaults import (
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    TransportDefaults,
)
from wow_core.transport.in_memory import InMemoryBroker, InMemoryTransport
from wow_core.transport.kit import ReadAhead, Readiness
from wow_core.transport.spi import (
    ReleasingRecord,
    RevocationListener,
    RevocationListening,
    Transport,
    TransportMessage,
    TransportReceiver,
    TransportRecord,
    set_revocation_listener,
)

__all__ = [
    "DecodeFailure",
    "DecodeFailureAction",
    "DeadLetterReason",
    "DeadLetterSender",
    "DecodeFailureObserver",
    "DecodeFailureDefault",
    "DefaultDecodeFailureHandler",
    "DefaultTopicNaming",
    "InMemoryBroker",
    "InMemoryTransport",
    "ReadAhead",
    "Readiness",
    "ReleasingRecord",
    "RevocationListener",
    "RevocationListening",
    "TopicNaming",
    "Transport",
    "TransportCommandBus",
    "TransportBase",
    "TransportDecodeFailureHandler",
    "TransportDefaults",
    "TransportDomainEventBus",
    "TransportMessage",
    "TransportMessageBus",
    "TransportReceiver",
    "TransportRecord",
    "TransportStateEventBus",
    "set_revocation_listener",
]
