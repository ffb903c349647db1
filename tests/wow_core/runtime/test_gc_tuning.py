"""``wow run`` keeps what start-up built out of the garbage collector's reach."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from collections.abc import Iterator

import pytest

from tests.accounts import Account
from wow_core.runtime.app import WowApp
from wow_core.runtime.gc_tuning import DEFAULT_GC_THRESHOLD, freeze_start_up
from wow_core.runtime.serve import serve
from wow_core.runtime.settings import WowSettings


@pytest.fixture(autouse=True)
def gc_restored() -> Iterator[None]:
    """Each test leaves the worker's collector as it found it."""
    threshold = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_freezing_moves_every_live_object_out_of_reach_and_raises_the_young_threshold() -> None:
    gc.set_threshold(700, 10, 10)
    kept = [object() for _ in range(10)]
    frozen = freeze_start_up()
    # a frozen object that dies leaves the permanent generation (the log record written
    # after the count may free one): the count can only fall
    assert 0 < gc.get_freeze_count() <= frozen
    assert not any(item is kept for item in gc.get_objects()), "a live container is out of reach"
    assert gc.get_threshold() == (DEFAULT_GC_THRESHOLD, 10, 10)
    assert sum(gc.get_count()) < 100  # the generations were emptied into the permanent one
    del kept


def test_a_higher_threshold_already_set_or_zero_is_kept() -> None:
    gc.set_threshold(50_000, 20, 30)
    freeze_start_up(10_000)
    assert gc.get_threshold() == (50_000, 20, 30)
    gc.set_threshold(700, 10, 10)
    freeze_start_up(0)
    assert gc.get_threshold() == (700, 10, 10)


class Serving(logging.Handler):
    """Set once serve() logs that it serves (after the tuning, before it waits)."""

    def __init__(self) -> None:
        super().__init__()
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("serving gcfreeze"):
            self.event.set()


async def _collector_while_serving(settings: WowSettings) -> tuple[int, int]:
    runtime = WowApp("gcfreeze", aggregates=[Account]).runtime(settings)
    serving = Serving()
    logger = logging.getLogger("wow.run")
    logger.addHandler(serving)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        served = asyncio.get_running_loop().create_task(serve(runtime, stop_signals=(signal.SIGUSR1,)))
        async with asyncio.timeout(10):
            await serving.event.wait()
        seen = gc.get_freeze_count(), gc.get_threshold()[0]
        os.kill(os.getpid(), signal.SIGUSR1)
        async with asyncio.timeout(10):
            assert await served == 0
    finally:
        logger.removeHandler(serving)
        logger.setLevel(level)
    return seen


async def test_wow_run_freezes_once_the_runtime_started() -> None:
    gc.set_threshold(700, 10, 10)
    frozen, young = await _collector_while_serving(WowSettings())
    assert frozen > 0
    assert young == DEFAULT_GC_THRESHOLD


async def test_wow_run_with_gc_freeze_off_leaves_the_collector_alone() -> None:
    gc.set_threshold(700, 10, 10)
    frozen, young = await _collector_while_serving(WowSettings(runtime={"gc_freeze": False}))
    assert frozen == 0
    assert young == 700
