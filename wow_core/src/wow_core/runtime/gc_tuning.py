"""Keeping what start-up built out of the garbage collector's reach (``wow run``).

A service's start-up builds objects that live as long as the process: modules, the
container, buses, dispatchers, the registry. CPython's cyclic collector walks every
tracked object of a generation on each of its collections, so these long-lived objects
make the collections of the oldest generation slower for the whole life of the process,
and the collections of the young generations run every 700 allocations by default,
while the hot path of a command allocates a few dozen short-lived objects, almost none
in reference cycles (reference counting frees them).

:func:`freeze_start_up` is what ``wow run`` does once the runtime started, unless
``WOW_RUNTIME__GC_FREEZE=false``:

1. ``gc.collect()``: garbage of start-up is freed first, so nothing freed is frozen;
2. ``gc.freeze()``: every object alive now moves to the permanent generation, which the
   collector never walks (they are still freed by reference counting; a reference cycle
   among them is never collected, which for objects of start-up costs nothing);
3. the youngest generation's threshold is raised to ``WOW_RUNTIME__GC_THRESHOLD``
   (default 10000 allocations, Python's is 700) when it is lower, so young collections
   run about fourteen times less often; 0 keeps Python's threshold.

Nothing here changes what is collected, only when the collector runs and what it walks.
A library embedding the runtime (``async with runtime``) is not tuned: the process is
its host's, which decides.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("wow.run")

DEFAULT_GC_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation under ``wow run``."""


def freeze_start_up(threshold: int = DEFAULT_GC_THRESHOLD) -> int:
    """Collect, freeze every object alive, raise the young threshold to ``threshold``
    (0 or a lower value: kept as it is); return the count of objects frozen."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if threshold and young < threshold:
        gc.set_threshold(threshold, middle, old)
    frozen = gc.get_freeze_count()
    log.info(
        "garbage collector: %d objects of start-up frozen, young generation threshold %d",
        frozen,
        gc.get_threshold()[0],
    )
    return frozen
