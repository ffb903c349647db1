"""wow_nats: a NATS JetStream transport for wow-py, built as a third-party plugin.

See the package README: it is the worked example of the plugin-authoring guide.

Importing the package is cheap: each name is imported on first use, so loading its
plugin entry point (every ``wow`` process does) costs nothing until the feature is used.
"""

from __future__ import annotations

from wow_core._lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep the import of the package cheap
if TYPE_CHECKING:
    from wow_nats.errors import StreamSubjectsTakenError
    from wow_nats.layout import InvalidTopicError, StreamLayout
    from wow_nats.receiver import NatsReceiver
    from wow_nats.record import NatsRecord
    from wow_nats.settings import NatsSettings
    from wow_nats.transport import NatsTransport

__version__ = "0.1.0"

_EXPORTS = {
    "StreamSubjectsTakenError": "wow_nats.errors",
    "InvalidTopicError": "wow_nats.layout",
    "StreamLayout": "wow_nats.layout",
    "NatsReceiver": "wow_nats.receiver",
    "NatsRecord": "wow_nats.record",
    "NatsSettings": "wow_nats.settings",
    "NatsTransport": "wow_nats.transport",
}

__all__ = [
    "InvalidTopicError",
    "NatsReceiver",
    "NatsRecord",
    "NatsSettings",
    "NatsTransport",
    "StreamLayout",
    "StreamSubjectsTakenError",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
