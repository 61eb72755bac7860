"""The commands' start-up without the garbage collector's full passes.

A command's imports (torch, Ray, RLlib) and the algorithm it builds make about 600,000 objects
that live as long as the process. Python's cyclic collector walks every one of them in each full
pass, and the start-up's own allocations set off several: on a 2-core CPU they took about 1.1 s
of the main job's 3.9 s from its first import to a built algorithm (benchmarks/RESULTS.md, "The
main job from the command to the prompt"). So the console scripts (``entry.py``) turn the
collector off before their first import, and once the command is ready to work (the main job:
its algorithm built) ``resume`` moves every object made so far to a permanent generation that
later passes skip (``gc.freeze``) and turns the collector back on. What had become garbage by
then (about 20,000 objects, a few MB) stays in memory: the full pass that would free it costs
half a second.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Turn the collector off until ``resume``."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze what the start-up made and turn the collector back on; nothing where ``pause``
    did not turn it off (a command run from a script or a test)."""
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False
