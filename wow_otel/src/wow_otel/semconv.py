"""The names wow-otel records, by the OpenTelemetry semantic conventions.

Pinned version: the conventions of schema **1.44.0** (``SCHEMA_URL``, the schema of the
``opentelemetry-semantic-conventions`` release the SDK pins, 0.66b2): the messaging
metrics ``messaging.client.sent.messages``, ``messaging.client.operation.duration``,
``messaging.client.consumed.messages``, ``messaging.process.duration`` and the messaging
span attributes. What the conventions do not name is under ``wow.``.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv.schemas import Schemas

SCHEMA_URL: Final = Schemas.V1_44_0.value
INSTRUMENTATION_NAME: Final = "wow_otel"

# -- metrics (semconv) --
SENT_MESSAGES: Final = "messaging.client.sent.messages"
OPERATION_DURATION: Final = "messaging.client.operation.duration"
CONSUMED_MESSAGES: Final = "messaging.client.consumed.messages"
PROCESS_DURATION: Final = "messaging.process.duration"

# -- metrics (wow) --
WAIT_DURATION: Final = "wow.command.wait.duration"
WAITS: Final = "wow.command.waits"
STORE_DURATION: Final = "wow.eventstore.operation.duration"
STORE_CONFLICTS: Final = "wow.eventstore.conflicts"

# -- attributes (semconv) --
SYSTEM: Final = "messaging.system"
DESTINATION: Final = "messaging.destination.name"
GROUP: Final = "messaging.consumer.group.name"
OPERATION_TYPE: Final = "messaging.operation.type"
OPERATION_NAME: Final = "messaging.operation.name"
MESSAGE_ID: Final = "messaging.message.id"
CONVERSATION_ID: Final = "messaging.message.conversation_id"
ERROR_TYPE: Final = "error.type"

# -- attributes (wow) --
KIND: Final = "wow.message.kind"
CONTEXT: Final = "wow.context"
AGGREGATE: Final = "wow.aggregate"
MESSAGE: Final = "wow.message"
AGGREGATE_ID: Final = "wow.aggregate.id"
AGGREGATE_VERSION: Final = "wow.aggregate.version"
COMMAND_ID: Final = "wow.command.id"
REQUEST_ID: Final = "wow.command.request_id"
OUTCOME: Final = "wow.outcome"
WAIT_STAGE: Final = "wow.command.wait.stage"
STAGE: Final = "wow.command.stage"
COMPONENT: Final = "wow.component"
PROCESSOR: Final = "wow.processor"
FUNCTION: Final = "wow.function"
STORE_OPERATION: Final = "wow.eventstore.operation"

LOCAL_SYSTEM: Final = "wow_local"
"""``messaging.system`` of the in-process (in-memory) local buses."""

DURATION_BUCKETS: Final = (
    0.0,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
"""Histogram boundaries of every duration (seconds): finer below a millisecond than the
SDK's default, since a local hand-off or an in-memory append takes microseconds."""
