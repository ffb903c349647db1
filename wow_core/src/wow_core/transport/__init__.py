"""The Transport SPI and (in submodules) TransportMessageBus and the in-memory transport."""

from wow_core.transport.decode_failure import (
    DecodeFailure,
    DecodeFailureAction,
    DecodeFailureObserver,
    DefaultDecodeFailureHandler,
    TransportDecodeFailureHandler,
)
from wow_core.transport.spi import (
    DecodeFailureDefault,
    DefaultTopicNaming,
    TopicNaming,
    Transport,
    TransportMessage,
    TransportReceiver,
    TransportRecord,
)

__all__ = [
    "DecodeFailure",
    "DecodeFailureAction",
    "DecodeFailureObserver",
    "DecodeFailureDefault",
    "DefaultDecodeFailureHandler",
    "DefaultTopicNaming",
    "TopicNaming",
    "Transport",
    "TransportDecodeFailureHandler",
    "TransportMessage",
    "TransportReceiver",
    "TransportRecord",
]
