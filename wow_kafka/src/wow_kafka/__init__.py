"""wow_kafka: the Kafka transport of wow-py (aiokafka).

``KafkaTransport`` moves the strings of ``TransportMessageBus`` through Kafka: one topic
per named aggregate and message kind, the aggregate id as record key, at-least-once
delivery with commits that never pass an unacknowledged record.

Importing the package is cheap: each name is imported on first use, so loading its
plugin entry point (every ``wow`` process does) costs nothing until the feature is used.
"""

from __future__ import annotations

from wow_core._lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep the import of the package cheap
if TYPE_CHECKING:
    from wow_kafka.errors import (
        KafkaCommitError,
        KafkaConnectError,
        KafkaSendError,
        KafkaTopicError,
        KafkaTransportError,
    )
    from wow_kafka.receiver import KafkaTransportReceiver
    from wow_kafka.record import KafkaRecord
    from wow_kafka.settings import KafkaSettings
    from wow_kafka.transport import KafkaTransport

__version__ = "0.1.0"

_EXPORTS = {
    "KafkaConnectError": "wow_kafka.errors",
    "KafkaSendError": "wow_kafka.errors",
    "KafkaCommitError": "wow_kafka.errors",
    "KafkaTopicError": "wow_kafka.errors",
    "KafkaTransportError": "wow_kafka.errors",
    "KafkaTransportReceiver": "wow_kafka.receiver",
    "KafkaRecord": "wow_kafka.record",
    "KafkaSettings": "wow_kafka.settings",
    "KafkaTransport": "wow_kafka.transport",
}

__all__ = [
    "KafkaConnectError",
    "KafkaRecord",
    "KafkaSendError",
    "KafkaSettings",
    "KafkaCommitError",
    "KafkaTopicError",
    "KafkaTransport",
    "KafkaTransportError",
    "KafkaTransportReceiver",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
