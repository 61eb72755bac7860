"""Keep numba's on-disk kernel cache honest.

numba invalidates a cached kernel only when the file that defines it changes, not when a
function it inlines from another module does (here: the physics, the RNG and ``numba_kernel``).
Compiling the parallel CPU kernel takes ~20 s, so caching is worth keeping: this drops the
cached files whenever any of those sources changes.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os

logger = logging.getLogger(__name__)

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("_jit.py", "physics.py", "rng.py", "backends/numba_kernel.py", "backends/numba_cpu.py")


def sources_digest() -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        with open(os.path.join(_PACKAGE, name), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def drop_if_stale(module_file: str) -> None:
    """Delete ``module_file``'s cached kernels if the sources they inline have changed."""
    cache_dir = os.path.join(os.path.dirname(os.path.abspath(module_file)), "__pycache__")
    stem = os.path.splitext(os.path.basename(module_file))[0]
    stamp = os.path.join(cache_dir, f"{stem}.kernel-sources")
    current = sources_digest()
    try:
        with open(stamp) as f:
            if f.read() == current:
                return
    except OSError:
        pass
    try:
        for path in glob.glob(os.path.join(cache_dir, f"{stem}.*.nb[ic]")):
            os.remove(path)
        os.makedirs(cache_dir, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(current)
    except OSError as err:  # read-only install: numba then caches elsewhere or not at all
        logger.debug("could not refresh the numba kernel cache in %s: %s", cache_dir, err)
