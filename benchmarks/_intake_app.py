"""The service the cluster intake benchmark runs: ``wow run benchmarks._intake_app:app``."""

from __future__ import annotations

from dataclasses import dataclass

from wow_core.modeling import aggregate, on_command, on_sourcing
from wow_core.runtime.app import WowApp


@dataclass(frozen=True)
class CounterState:
    last: int = -1


@dataclass(frozen=True)
class Add:
    seq: int


@dataclass(frozen=True)
class Added:
    seq: int


@aggregate("tally", "counter", state=CounterState)
class Counter:
    @on_command(allow_create=True)
    def add(self, state: CounterState, body: Add) -> Added:
        return Added(body.seq)

    @on_sourcing
    def added(self, state: CounterState, event: Added) -> CounterState:
        return CounterState(event.seq)


app = WowApp("tally-bench", aggregates=[Counter])
