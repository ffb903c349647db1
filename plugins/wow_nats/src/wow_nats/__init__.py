"""wow_nats: a NATS JetStream transport for wow-py, built as a third-party plugin.

See the package README: it is the worked example of the plugin-authoring guide.
"""

from wow_nats.errors import StreamSubjectsTakenError
from wow_nats.layout import InvalidTopicError, StreamLayout
from wow_nats.receiver import NatsReceiver
from wow_nats.record import NatsRecord
from wow_nats.settings import NatsSettings
from wow_nats.transport import NatsTransport

__version__ = "0.1.0"

__all__ = [
    "InvalidTopicError",
    "NatsReceiver",
    "NatsRecord",
    "NatsSettings",
    "NatsTransport",
    "StreamLayout",
    "StreamSubjectsTakenError",
]
