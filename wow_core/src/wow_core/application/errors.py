"""The errors of application commands (spec 004).

Each names what failed and why in one line; none carries the rejected value itself
beyond a short, bounded description, so a hostile payload does not flood a log.
"""

from __future__ import annotations

from wow_core.model import DecodeFailureKind


class ApplicationCommandError(Exception):
    """The base of every error of :mod:`wow_core.application`."""


class CommandSerializationError(ApplicationCommandError, ValueError):
    """A command that cannot cross the asynchronous boundary, or a payload that is not
    one: raised by ``serialize`` before anything is sent, and by ``deserialize`` before
    (or, for a constructor that changes state, after) the command is constructed."""


class OperationContextError(ApplicationCommandError, ValueError):
    """Operation attributes that cannot cross the boundary, or a context payload that is
    not an accepted one (an attribute not on the allowlist, a reserved name, a value that
    is not JSON-safe)."""


class EnvelopeError(ApplicationCommandError, ValueError):
    """A transported record that is not a command envelope: ``kind`` says how
    (``NOT_JSON``, or ``WRONG_SHAPE`` for JSON that is not an envelope of this version).

    It can never succeed, so the worker does not retry it: the record takes the
    decode-failure path, like an undecodable record of the aggregate bus."""

    def __init__(self, message: str, kind: DecodeFailureKind = DecodeFailureKind.WRONG_SHAPE) -> None:
        super().__init__(message)
        self.kind = kind


class TransportConfigurationError(ApplicationCommandError, LookupError):
    """A named transport that is not configured, or a registry that cannot be built:
    a configuration error, never an ambiguous send."""


class NoHandlerError(ApplicationCommandError, LookupError):
    """No handler is registered for the command's class."""


class CommandRejected(ApplicationCommandError):
    """The worker refused a delivery after restoring it: the restored object is not of
    the requested type, its marker does not name this worker's transport, or the
    context carries reserved attributes."""


class TransportSendException(ApplicationCommandError):
    """The transport's ``send`` raised: the command may or may not have been accepted.

    Not retryable by default (:attr:`retryable` is ``False``): a generic transport does
    not promise an idempotent send, so a retry can enqueue the command twice. The
    original error is the ``__cause__``.
    """

    retryable: bool = False

    def __init__(self, transport_name: str, operation_id: str, cause: BaseException) -> None:
        super().__init__(
            f"sending operation {operation_id} through transport {transport_name!r} failed "
            f"(the command may have been accepted): {type(cause).__name__}: {cause}"
        )
        self.transport_name = transport_name
        self.operation_id = operation_id
