"""The Transport SPI and (in submodules) TransportMessageBus and the in-memory transport."""

from wow_core.transport.decode_failure import (
    DecodeFailure,
    DecodeFailureAction,
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
    "DecodeFailureDefault",
    "DefaultTopicNaming",
    "TopicNaming",
    "Transport",
    "TransportDecodeFailureHandler",
    "TransportMessage",
    "TransportReceiver",
    "TransportRecord",
]
