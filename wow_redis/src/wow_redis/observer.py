"""``RedisMessageBusObserver``: what the Redis transport reports besides records.

Every event that does not reach a consumer as a record is reported here, never
dropped in silence: an entry that is not a message (left pending), an entry sent to the
dead-letter stream, entries claimed from idle consumers, connection errors and retries.
The default observer logs each event (with stream, group and entry id) and counts it in
the :class:`~wow_core.metrics.Metrics` it was given; subclass it to add your own
reaction. Tags are stream and group names only, so series stay bounded.
"""

from __future__ import annotations

import logging

from wow_core.metrics import Metrics, NoopMetrics

log = logging.getLogger("wow_redis")

UNDECODABLE = "wow.redis.undecodable"
DEAD_LETTERED = "wow.redis.dead_lettered"
CLAIMED = "wow.redis.claimed"
CONNECTION_ERRORS = "wow.redis.connection_errors"
SEND_FAILURES = "wow.redis.send_failures"
ACK_FAILURES = "wow.redis.ack_failures"


class RedisMessageBusObserver:
    """Logs and counts what the Redis transport does outside the record flow."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics: Metrics = metrics if metrics is not None else NoopMetrics()

    def undecodable(self, stream: str, group: str, entry_id: str, reason: str) -> None:
        """An entry that is not a message; it stays pending (never acknowledged as consumed).

        Called by the transport for an entry without a UTF-8 ``msg`` field, and by the
        decode-failure policy for a payload the bus could not decode. Recovery claims it
        again after the idle time; past ``max_deliveries`` it goes to ``<stream>.dlq``.
        """
        self.metrics.increment(UNDECODABLE, tags={"stream": stream, "group": group})
        log.warning(
            "undecodable entry left pending: stream=%s group=%s id=%s reason=%s",
            stream,
            group,
            entry_id,
            reason,
        )

    def dead_lettered(self, stream: str, group: str, entry_id: str, deliveries: int, reason: str) -> None:
        """An entry was copied to ``<stream>.dlq`` and acknowledged."""
        self.metrics.increment(DEAD_LETTERED, tags={"stream": stream, "group": group})
        log.error(
            "entry dead-lettered: stream=%s group=%s id=%s deliveries=%d reason=%s",
            stream,
            group,
            entry_id,
            deliveries,
            reason,
        )

    def claimed(self, stream: str, group: str, consumer: str, count: int) -> None:
        """``count`` idle pending entries were taken over by ``consumer``."""
        self.metrics.increment(CLAIMED, float(count), tags={"stream": stream, "group": group})
        log.info("claimed %d idle entries: stream=%s group=%s consumer=%s", count, stream, group, consumer)

    def connection_error(self, where: str, error: BaseException, attempt: int, delay: float) -> None:
        """A command failed on the connection; it is retried after ``delay`` seconds."""
        self.metrics.increment(CONNECTION_ERRORS, tags={"where": where})
        log.warning(
            "redis %s failed (attempt %d, retrying in %.2fs): %s: %s",
            where,
            attempt,
            delay,
            type(error).__name__,
            error,
        )

    def send_failed(self, count: int, error: BaseException) -> None:
        """A send batch failed after its retries; its senders got ``error``."""
        self.metrics.increment(SEND_FAILURES, float(count))
        log.error("redis send of %d entries failed: %s: %s", count, type(error).__name__, error)

    def ack_failed(self, stream: str, group: str, count: int, error: BaseException) -> None:
        """An XACK failed after its retries; the entries stay pending and come back."""
        self.metrics.increment(ACK_FAILURES, float(count), tags={"stream": stream, "group": group})
        log.error(
            "XACK of %d entries failed, they stay pending: stream=%s group=%s: %s: %s",
            count,
            stream,
            group,
            type(error).__name__,
            error,
        )
