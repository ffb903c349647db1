"""The domain model every other package speaks: names, headers, messages, wire form."""

from wow_core.model.aggregate import DEFAULT_TENANT_ID, AggregateId, NamedAggregate
from wow_core.model.header import Header, ReadOnlyHeaderError
from wow_core.model.messages import (
    CommandMessage,
    DomainEvent,
    DomainEventStream,
    Message,
    StateEvent,
    TopicKind,
    new_id,
    now_ms,
)
from wow_core.model.wire import (
    BodyTypeRegistry,
    DecodeError,
    DecodeFailureKind,
    EncodeError,
    MessageCodec,
    UnknownBodyTypeError,
)

__all__ = [
    "DEFAULT_TENANT_ID",
    "AggregateId",
    "BodyTypeRegistry",
    "CommandMessage",
    "DecodeError",
    "DecodeFailureKind",
    "DomainEvent",
    "DomainEventStream",
    "EncodeError",
    "Header",
    "Message",
    "MessageCodec",
    "NamedAggregate",
    "ReadOnlyHeaderError",
    "StateEvent",
    "TopicKind",
    "UnknownBodyTypeError",
    "new_id",
    "now_ms",
]
