"""A body sent in-process is refused where the wire would refuse it (WOW_COMMAND__STRICT_BODIES)."""

from __future__ import annotations

import pytest

from tests.accounts import Account, Open, Withdraw
from wow_core import WowApp, WowRuntime
from wow_core.command import CommandValidationError, ErrorCodes
from wow_core.runtime.settings import WowSettings


def bank() -> WowRuntime:
    return WowApp("bank", aggregates=[Account]).runtime(WowSettings.load())


async def balance(runtime: WowRuntime, id: str) -> int:
    target = runtime.aggregates.command(Withdraw(1), id).aggregate_id
    _, state = await runtime.kernel.load_state(runtime.aggregates.get(target.named_aggregate), target)  # type: ignore[arg-type]
    return int(state.balance)


@pytest.mark.parametrize("amount", ["5", True, 1.0], ids=["text", "bool", "float"])
async def test_a_wrongly_typed_body_is_command_invalid_before_anything_is_sent(amount: object) -> None:
    async with bank() as runtime:
        await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 100), "acc-1"))
        with pytest.raises(CommandValidationError) as refused:
            await runtime.gateway.send_and_wait(runtime.aggregates.command(Withdraw(amount), "acc-1"))  # type: ignore[arg-type]
        assert refused.value.code == ErrorCodes.COMMAND_INVALID
        assert [(v.path, v.message) for v in refused.value.violations] == [
            ("amount", "Input should be a valid integer")
        ]
        assert await balance(runtime, "acc-1") == 100


async def test_the_lax_mode_leaves_the_in_process_check_lax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOW_COMMAND__STRICT_BODIES", "false")
    async with bank() as runtime:
        await runtime.gateway.send_and_wait(runtime.aggregates.command(Open("ada", 100), "acc-1"))
        result = await runtime.gateway.send_and_wait(runtime.aggregates.command(Withdraw(1.0), "acc-1"))  # type: ignore[arg-type]
        assert result.succeeded
