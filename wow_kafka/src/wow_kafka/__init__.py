"""wow_kafka: the Kafka transport of wow-py (aiokafka).

``KafkaTransport`` moves the strings of ``TransportMessageBus`` through Kafka: one topic
per named aggregate and message kind, the aggregate id as record key, at-least-once
delivery with commits that never pass an unacknowledged record.
"""

from wow_kafka.errors import KafkaConnectError, KafkaSendError, KafkaTopicError, KafkaTransportError
from wow_kafka.receiver import KafkaTransportReceiver
from wow_kafka.record import KafkaRecord
from wow_kafka.settings import KafkaSettings
from wow_kafka.transport import KafkaTransport

__version__ = "0.1.0"

__all__ = [
    "KafkaConnectError",
    "KafkaRecord",
    "KafkaSendError",
    "KafkaSettings",
    "KafkaTopicError",
    "KafkaTransport",
    "KafkaTransportError",
    "KafkaTransportReceiver",
]
