"""Whether an object is in the garbage collector's permanent generation (`gc.freeze`), for the tests of
code that freezes and unfreezes around a run or a round.

`gc.get_freeze_count()` is no test of that: it also drops when a frozen object is freed, which any
other thread of the test process (a controller an earlier test left stopping) may do meanwhile."""

from __future__ import annotations

import gc


def is_frozen(obj: object) -> bool:
    """True when `obj` (a tracked container) is in no generation the collector walks: frozen."""
    assert gc.is_tracked(obj), "only a tracked container can be frozen"
    return not any(o is obj for generation in range(3) for o in gc.get_objects(generation))
