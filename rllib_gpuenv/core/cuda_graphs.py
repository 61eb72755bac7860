"""Recording CUDA graphs, and a clean state after a recording fails.

Three parts of the package record CUDA graphs, each falling back to launching as before where
recording fails: the learners' gradient step (``rllib/update_graph.py``), numba-cuda's env step
(``backends/numba_cuda.py``) and the device env runner's rollout (``rllib/rollout_graph.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")

logger = logging.getLogger(__name__)


def release_random_generator(device: torch.device) -> None:
    """Take the device's default CUDA generator out of capture mode after a failed capture.

    A capture registers the generator and puts it in capture mode; only a capture that ends well
    takes it out (torch's ``capture_end`` raises before it gets there). Left so, every random
    draw outside a capture on that device fails ("Offset increment outside graph capture
    encountered unexpectedly"): the env runner's next action draw, say. A one-op capture that
    ends well releases it."""
    try:
        scratch = torch.zeros((), device=device)
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            scratch.add_(1)
    except Exception as error:  # noqa: BLE001 - say what is left broken rather than fail the caller
        logger.warning("After the failed capture, random draws on %s may fail (%s: %s)", device, type(error).__name__, error)


def record_graph(run: Callable[[], T], device: torch.device) -> tuple[torch.cuda.CUDAGraph, T]:
    """``run()`` recorded as a CUDA graph on a stream of its own on ``device`` (recording runs
    nothing: replay the graph for that); returns the graph and what ``run`` returned. Raises what
    recording raised, with the device's generator released."""
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device), capture_error_mode="thread_local"):
            result = run()
    except Exception:
        release_random_generator(device)  # the next random draw on this GPU must work
        raise
    return graph, result
