"""The garbage collector of a serving process: its startup heap frozen, fewer young collections,
and the time spent collecting counted (``threadkeeper_gc_seconds_total``).

Why: a service process allocates a few hundred thousand objects at start-up (modules, schemas,
compiled graphs, the container) that live as long as it, and every full collection walked them
all again; and a turn allocates tens of thousands of short-lived objects (messages, chunks,
rows), so CPython's default of a young collection every 700 allocations ran one every ~25 ms.
Measured in the single layout at 100 concurrent provider-path turns (``benchmarks/providers.py``,
docs/benchmarks.md): the collector took ~6 ms of a turn's ~40 ms of CPU (a full collection
every ~3 s at ~100 ms, the event loop standing still each time); frozen and with young
collections every 20,000 allocations, 1.0-1.2 ms.

Only for a process that is the service (``python -m app serve``, ``python -m app worker``): a
frozen object is never collected, so a process that builds and drops apps (the tests) must not
freeze each one's heap.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import structlog

from app.metrics import GC_SECONDS

#: Allocations (net of deallocations) between young collections, young collections between
#: middle ones, middle ones between full ones (CPython's defaults: 700, 10, 10). Few young
#: objects outlive a turn, so a larger young generation mostly dies before it is walked.
THRESHOLDS = (20_000, 10, 10)


def serving_gc() -> int:
    """Collect, freeze what is still alive (the permanent generation), set ``THRESHOLDS`` and
    start counting collection time; the number of objects frozen. Idempotent."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    if _clock not in gc.callbacks:
        gc.callbacks.append(_clock)
    frozen = gc.get_freeze_count()
    structlog.get_logger().info("serving_gc", frozen_objects=frozen, thresholds=list(THRESHOLDS))
    return frozen


_started: dict[int, float] = {}
_counters = [GC_SECONDS.labels(str(generation)) for generation in range(3)]


def _clock(phase: str, info: dict[str, Any]) -> None:
    """A ``gc.callbacks`` entry: each collection's duration, by generation."""
    generation = info["generation"]
    if phase == "start":
        _started[generation] = time.perf_counter()
    elif (began := _started.pop(generation, None)) is not None:
        _counters[generation].inc(time.perf_counter() - began)
