"""What a Kafka dead letter says about itself: record headers beside the original bytes.

A record goes to ``<topic>.dlq`` when it cannot be decoded (the bus's decode-failure
policy) or when it was released ``WOW_KAFKA__MAX_DELIVERIES`` times
(:class:`~wow_kafka.receiver.KafkaTransportReceiver`). Its key, value and timestamp are
the original's, byte for byte, so a tool can send it back as it was; why it is there is
in its headers (UTF-8 values), the names those of the NATS transport's dead letters in
lower case:

- ``wow-dlq-reason``: ``undecodable`` or ``max_deliveries``;
- ``wow-dlq-group``: the group that gave up on it, as the application names it (the
  subscription's group; the Kafka group id is the transport's group prefix before it);
- ``wow-dlq-position``: ``partition:offset`` in the original topic;
- ``wow-dlq-deliveries``: its deliveries to that group by the member that gave up;
- ``wow-dlq-error``: the decode error, where there is one (at most
  :data:`DEAD_LETTER_ERROR_BYTES` bytes of it).
"""

from __future__ import annotations

from wow_core.transport import DeadLetterReason
from wow_kafka.lanes import Headers

REASON_HEADER = "wow-dlq-reason"
GROUP_HEADER = "wow-dlq-group"
POSITION_HEADER = "wow-dlq-position"
DELIVERIES_HEADER = "wow-dlq-deliveries"
ERROR_HEADER = "wow-dlq-error"

DEAD_LETTER_ERROR_BYTES = 1024
"""The most of an error's text a dead letter carries (a record header is small)."""


def dead_letter_headers(reason: DeadLetterReason) -> Headers:
    """The record headers of a dead letter sent for ``reason``."""
    headers = [
        (REASON_HEADER, reason.reason.encode()),
        (GROUP_HEADER, reason.group.encode()),
        (POSITION_HEADER, reason.position.encode()),
        (DELIVERIES_HEADER, str(reason.deliveries).encode()),
    ]
    if reason.error:
        error = reason.error.encode("utf-8", "replace")
        if len(error) > DEAD_LETTER_ERROR_BYTES:
            error = error[:DEAD_LETTER_ERROR_BYTES].decode("utf-8", "ignore").encode()
        headers.append((ERROR_HEADER, error))
    return tuple(headers)
