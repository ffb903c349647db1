"""ApplicationCommandBus and TransportMiddleware on the producer: handlers, the pipeline
order, the asynchronous short-circuit, SYNC pass-through, and which error is which."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.wow_core.application.commands import Audit, ChargeCard, SendReceipt
from tests.wow_core.application.support import RecordingTransport
from wow_core.application import (
    ApplicationCommandBus,
    CommandSerializationError,
    ExecutionMode,
    JsonCommandSerializer,
    JsonOperationContextSerializer,
    Next,
    NoHandlerError,
    Operation,
    OperationContextError,
    OperationStatus,
    TransportConfigurationError,
    TransportMiddleware,
    TransportRegistry,
    TransportSendException,
)
from wow_core.transport.spi import Transport


class Trace:
    """A middleware that notes the operation passing through it."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def __call__(self, operation: Operation, next: Next) -> Any:
        self.log.append(f"{self.name}>")
        result = await next(operation)
        self.log.append(f"<{self.name}")
        return result


def producer(
    log: list[str], transport: Transport | None = None, allowlist: list[str] | None = None
) -> tuple[ApplicationCommandBus, RecordingTransport | Any]:
    sent_on = transport or RecordingTransport()
    registry = TransportRegistry({"payments": sent_on})
    middleware = TransportMiddleware(
        registry, JsonCommandSerializer(), JsonOperationContextSerializer(allowlist or ["tenant_id"])
    )
    bus = ApplicationCommandBus(
        [Trace("policy", log), middleware, Trace("event", log), Trace("transaction", log)]
    )

    @bus.handler(ChargeCard)
    async def charge(command: ChargeCard, operation: Operation) -> str:
        log.append("handler")
        return f"charged {command.amount}"

    bus.register(Audit, lambda command, operation: f"audited {command.what}")
    return bus, sent_on


async def test_a_plain_command_runs_through_every_middleware_to_its_handler() -> None:
    log: list[str] = []
    bus, transport = producer(log)
    operation = await bus.dispatch(Audit("x"))
    assert operation.status is OperationStatus.COMPLETED
    assert operation.result == "audited x"
    assert log == ["policy>", "event>", "transaction>", "<transaction", "<event", "<policy"]
    assert transport.sent == []


async def test_an_asynchronous_command_short_circuits_at_the_transport_middleware() -> None:
    log: list[str] = []
    bus, transport = producer(log)
    operation = await bus.dispatch(ChargeCard("4242", 10), attributes={"tenant_id": "t1", "password": "p"})
    assert log == ["policy>", "<policy"], "authorization ran before enqueue; nothing inside transport ran"
    assert operation.status is OperationStatus.QUEUED
    assert operation.transport == "payments"
    assert operation.result is None
    [message] = transport.sent
    assert message.topic == "wow.application.payments"
    assert message.key == operation.operation_id
    envelope = json.loads(message.payload)
    assert set(envelope) == {"v", "operation_id", "command_class", "payload", "context"}
    assert envelope["operation_id"] == operation.operation_id
    assert envelope["command_class"] == "tests.wow_core.application.commands:ChargeCard"
    assert json.loads(envelope["payload"]) == {"card": "4242", "amount": 10, "note": None}
    assert json.loads(envelope["context"]) == {"tenant_id": "t1"}, "only allowlisted attributes cross"
    assert str(operation.created_at) not in message.payload


async def test_in_sync_mode_the_transport_middleware_passes_an_asynchronous_command_through() -> None:
    log: list[str] = []
    bus, transport = producer(log)
    operation = await bus.dispatch(ChargeCard("4242", 10), execution_mode=ExecutionMode.SYNC)
    assert operation.result == "charged 10"
    assert log == ["policy>", "event>", "transaction>", "handler", "<transaction", "<event", "<policy"]
    assert transport.sent == []


async def test_a_command_without_a_handler_is_a_no_handler_error() -> None:
    bus = ApplicationCommandBus()
    with pytest.raises(NoHandlerError, match="no handler is registered for Audit"):
        await bus.dispatch(Audit("x"))


def test_one_handler_per_command_class() -> None:
    bus = ApplicationCommandBus(handlers={Audit: lambda command, operation: None})
    with pytest.raises(ValueError, match="Audit already has a handler"):
        bus.register(Audit, lambda command, operation: None)
    with pytest.raises(TypeError, match="by command class"):
        bus.register("Audit", lambda command, operation: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not callable"):
        ApplicationCommandBus([object()])  # type: ignore[list-item]


async def test_a_serialization_failure_prevents_sending_and_reaches_the_caller() -> None:
    log: list[str] = []
    bus, transport = producer(log)
    with pytest.raises(CommandSerializationError, match="declared int, holds float"):
        await bus.dispatch(ChargeCard("4242", 1.5))  # type: ignore[arg-type]
    with pytest.raises(OperationContextError, match="not a finite number"):
        await bus.dispatch(ChargeCard("4242", 1), attributes={"tenant_id": float("nan")})
    assert transport.sent == []


async def test_an_error_of_the_transports_send_is_a_transport_send_exception_that_is_not_retryable() -> None:
    cause = ConnectionResetError("the broker went away")
    bus, _ = producer([], transport=RecordingTransport(fail_with=cause))
    with pytest.raises(TransportSendException, match="may have been accepted") as raised:
        await bus.dispatch(ChargeCard("4242", 1), operation_id="op-1")
    assert raised.value.retryable is False
    assert raised.value.__cause__ is cause
    assert raised.value.operation_id == "op-1"
    assert raised.value.transport_name == "payments"


async def test_a_transport_name_that_is_not_configured_is_a_configuration_error_not_a_send_error() -> None:
    log: list[str] = []
    bus, _ = producer(log)
    bus.register(SendReceipt, lambda command, operation: None)
    with pytest.raises(
        TransportConfigurationError, match="no transport named 'mail' is configured"
    ) as raised:
        await bus.dispatch(SendReceipt("a@b.c"))
    assert not isinstance(raised.value, TransportSendException)
    with pytest.raises(TransportConfigurationError, match="'mail'"):
        bus.validate()  # what a process checks at start-up


async def test_other_middleware_orders_are_allowed_and_mean_what_they_say() -> None:
    log: list[str] = []
    registry = TransportRegistry({"payments": RecordingTransport()})
    transport = TransportMiddleware(registry, JsonCommandSerializer())
    # policy inside transport: it runs only where the command executes (the worker's re-dispatch)
    bus = ApplicationCommandBus([Trace("event", log), transport, Trace("policy", log)])
    bus.register(ChargeCard, lambda command, operation: "done")
    await bus.dispatch(ChargeCard("c", 1))
    assert log == ["event>", "<event"], "event outside transport sees the producer's enqueue"
    log.clear()
    await bus.dispatch(ChargeCard("c", 1), execution_mode=ExecutionMode.SYNC)
    assert log == ["event>", "policy>", "<policy", "<event"]


def test_an_operation_id_is_a_non_empty_string() -> None:
    assert len(Operation(Audit("x")).operation_id) == 36
    with pytest.raises(ValueError, match="non-empty string"):
        Operation(Audit("x"), operation_id="")
