"""The ``@retry(...)`` spec a function declares reaches the recorder, with the runtime's
classification of the error; bad values are refused at decoration; the backoff doubles
up to its cap."""

from __future__ import annotations

import pytest

from wow_compensation.model import RetrySpec
from wow_core import on_event, projection, retry
from wow_core.event.declare import parse_component
from wow_core.event.failure import FunctionRetry


@projection(context="bank", aggregates=["bank.account"])
class Declared:
    @retry(max_retries=4, min_backoff=1.5, execution_timeout=9, unrecoverable=(KeyError,))
    @on_event
    def spec(self, event: int) -> None: ...

    @on_event
    def plain(self, event: str) -> None: ...


def test_the_declared_spec_is_on_the_function() -> None:
    functions = {f.function_name: f for f in parse_component(Declared(), default_context="bank")}
    assert functions["spec"].retry == FunctionRetry(True, 4, 1.5, 9, (), (KeyError,))
    assert functions["spec"].retry_enabled
    assert functions["plain"].retry is None


@pytest.mark.parametrize(
    "arguments",
    [{"max_retries": -1}, {"min_backoff": -0.5}, {"execution_timeout": 0}, {"unrecoverable": (int,)}],
)
def test_bad_values_are_refused_at_decoration(arguments: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="retry"):
        retry(**arguments)  # type: ignore[arg-type]


def test_the_backoff_doubles_up_to_the_cap() -> None:
    spec = RetrySpec(True, 10, min_backoff=180, execution_timeout=120, max_backoff=1000)
    assert [spec.backoff_ms(n) for n in range(4)] == [180_000, 360_000, 720_000, 1_000_000]
    assert spec.backoff_ms(10_000) == 1_000_000
    state = spec.retry_state(2, at=1_000)
    assert (state.retries, state.timeout_at, state.next_retry_at) == (2, 121_000, 721_000)
