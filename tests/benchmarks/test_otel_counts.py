"""What ``benchmarks.otel_counts`` counts: the bytecodes run between a start and a stop,
and per embedded command the marginal of two runs, each in a fresh process."""

from __future__ import annotations

import functools

import pytest

from benchmarks import otel_counts


def loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def test_the_bytecodes_of_a_function_grow_with_its_work_and_repeat_exactly() -> None:
    ten, thirty = otel_counts.bytecodes(lambda: loop(10)), otel_counts.bytecodes(lambda: loop(30))
    run_ten = functools.partial(loop, 10)
    assert otel_counts.bytecodes(run_ten) == otel_counts.bytecodes(run_ten), "the same work, the same count"
    key = next(key for key in ten if key.endswith(f":loop:{loop.__code__.co_firstlineno}"))
    per_iteration = (thirty[key] - ten[key]) / 20
    assert per_iteration >= 4, "the loop's own instructions: FOR_ITER, STORE, LOAD, BINARY_OP, ..."
    assert thirty[key] == ten[key] + 20 * per_iteration, "linear in the iterations"


def test_only_the_work_between_start_and_stop_is_counted() -> None:
    key = f"test_otel_counts.py:loop:{loop.__code__.co_firstlineno}"
    ten = otel_counts.bytecodes(lambda: loop(10))[key]
    loop(1000)
    counter = otel_counts.Bytecodes()
    counter.start()
    loop(10)
    counts = counter.stop()
    loop(1000)
    assert counts[key] == ten, "one run of ten iterations, not the thousands around it"


def test_a_command_run_takes_a_multiple_of_the_callers() -> None:
    with pytest.raises(ValueError, match="multiple of the 64 callers"):
        otel_counts.commands_run("off", 100)


def test_always_on_tracing_adds_bytecode_to_every_command_counted_in_fresh_processes() -> None:
    off, by_function = otel_counts.bytecodes_per_command("off", 64)
    traced, traced_by_function = otel_counts.bytecodes_per_command("all", 64)
    assert 2_000 < off < 40_000, f"{off:,.0f} bytecodes per command: a command, not its warm-up"
    assert traced > off + 1_000, f"tracing adds its spans: {off:,.0f} -> {traced:,.0f}"
    added = otel_counts.top_over(by_function, traced_by_function, most=20)
    assert any(key.startswith("lean.py:") for key in added), f"the lean tracer's work: {added}"
