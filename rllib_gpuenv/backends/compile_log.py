"""One log line when a kernel is compiled, so that a first step that waits says why."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger("rllib_gpuenv")


def _in_disk_cache(dispatcher, args) -> bool | None:
    """Whether numba has this kernel for these arguments in its on-disk cache (None: unknown)."""
    import numba

    try:
        cache = dispatcher._cache
        if not hasattr(cache, "_cache_file"):
            return False  # not cached on disk
        key = cache._index_key(tuple(numba.typeof(a) for a in args), dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # numba's cache internals moved: say nothing rather than something wrong
        return None


def _cache_note(dispatcher) -> str:
    path = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
    return f"numba caches it in {path} for later runs" if path else "once per process"


def log_first_call(dispatcher, args: tuple, what: str, call: Callable | None = None) -> None:
    """Run the first call of a kernel (``call()``, default ``dispatcher(*args)``), logging at INFO
    level before it when it compiles and after it how long that took."""
    cached = _in_disk_cache(dispatcher, args)
    if cached is False:
        logger.info("compiling the %s kernel (%s)", what, _cache_note(dispatcher))
    start = time.perf_counter()
    (call or (lambda: dispatcher(*args)))()
    if cached is False:
        logger.info("compiled the %s kernel in %.1f s", what, time.perf_counter() - start)
