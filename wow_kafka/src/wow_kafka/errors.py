"""Errors of the Kafka transport; each message says what failed and what to change."""

from __future__ import annotations

from aiokafka.errors import KafkaError


class KafkaTransportError(KafkaError):  # type: ignore[misc]
    """A failure of the Kafka transport; ``cause`` is the client's own error when there is one."""

    retriable = False

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause

    def __str__(self) -> str:
        return self.message


class KafkaSendError(KafkaTransportError):
    """The producer did not get the broker's acknowledgement of a record: it was not SENT."""


class KafkaConnectError(KafkaTransportError):
    """No broker of ``bootstrap_servers`` answered, or it refused the client's settings."""


class KafkaCommitError(KafkaTransportError):
    """A commit of consumed offsets was not acknowledged within its deadline (the broker
    lost the topic, its group coordinator is away): the records after the last commit
    are delivered again after a restart or a rebalance."""


class KafkaTopicError(KafkaTransportError):
    """A topic is missing and may not be created, has an illegal name, or its creation failed."""
