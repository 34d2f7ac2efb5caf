"""The garbage collector of a serving process, set up once after start-up (``countersign serve``).

Reference counting frees almost every object of a conversation as soon as it is done; the cyclic
collector only has to find reference cycles. Its cost grows with what it walks, not with what it frees,
and with a thousand conversations in flight most young objects are still alive when it looks: the
default settings (a young collection every 700 allocations, a full one every 100 young ones) spent about
a third of the process's CPU on it in ``bench/engine.py`` (1,000 threads). So, once start-up is done:

- the start-up heap (modules, classes, the engine) is frozen: no later collection walks it;
- a young collection waits for :data:`YOUNG_THRESHOLD` allocations: objects of a conversation that ends
  meanwhile are never walked, and fewer survivors are promoted into the costly older generations.

A process whose collector was switched off (threshold 0) keeps it off.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5_000
"""Allocations (minus deallocations) of tracked objects between two young collections (Python's default: 700)."""


def settle_for_serving() -> None:
    """Collect, freeze what start-up left, and make young collections rarer (see the module's docstring).

    >>> settle_for_serving()
    >>> gc.get_threshold()[0]
    5000
    """
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    if 0 < young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *older)
