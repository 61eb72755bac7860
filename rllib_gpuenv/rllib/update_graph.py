"""The lean update's gradient step on a GPU: captured once as a CUDA graph, replayed per minibatch.

A 64×64 network's gradient step is over a hundred tiny kernels launched from Python (forward,
loss, backward, clipping, the optimizer): the GPU waits on the launches, not on the math. A
CUDA graph records the launches once and replays them in one call (``torch.cuda.CUDAGraph``;
LeanRL does this for CleanRL's PPO). What a graph needs, and how ``StepGraph`` provides it:

* **Fixed memory.** An update's columns are copied into static buffers once per update, each
  minibatch's row numbers into a static index buffer once per step; the step gathers its
  minibatch inside the graph. Its loss and metrics land in tensors each replay overwrites; the
  loss's per-row values (prioritized replay's TD errors) in static columns, at the step's rows.
* **No host sync and no tensor made from a Python value inside the step.** What changes
  between updates (PPO's entropy and KL coefficients, the learning rate) lives in device
  tensors refreshed before each update. Clipping and RLlib's zeroing of NaN/inf gradients run
  without reading anything back; whether any gradient was NaN/inf is read once per update.
* **A warm-up.** The first steps run eagerly, on a side stream as the capture does (the
  optimizer creates its state, cuBLAS its workspace); then the step is captured. Warm-up steps
  are real steps, and a capture executes nothing, so a captured update trains as the eager one
  does (tests/test_gpu.py compares the weights).

Capture fails where something in the step reads back from the GPU or cannot be captured (a
module of the user's own, an optimizer without ``capturable``): the learner logs why and goes on
with the eager lean update, once torch's random generator is out of the capture mode a failed
capture leaves it in (``release_random_generator``). On a CPU the same static-buffer step runs
without capture, which is how the tests check everything but the capture itself without a GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rllib_gpuenv.core.cuda_graphs import release_random_generator

logger = logging.getLogger(__name__)

TensorColumns = dict[str, torch.Tensor]
Outputs = tuple[torch.Tensor, dict[str, torch.Tensor]]  # the loss and the metrics of one gradient step


@dataclass
class StepBuffers:
    """What a captured step reads and writes besides the module and the optimizer: fixed tensors."""

    columns: TensorColumns  # the update's rows
    index: torch.Tensor  # this step's minibatch: row numbers into ``columns``
    coefficients: dict[str, torch.Tensor]  # scalars the loss reads, refreshed each update
    nonfinite: torch.Tensor  # set when a step's gradients held NaN/inf (zeroed, as RLlib does)
    row_outputs: TensorColumns  # the loss's per-row values by name, a value per row of ``columns``


def minibatch_rows(rows: int, size: int, num_epochs: int, shuffle: bool, device) -> torch.Tensor:
    """Every gradient step's row numbers, ``(steps, size)``, in the order of the eager loop
    (``LeanUpdate.lean_update``): the first epoch in the batch's order, later ones permuted if
    ``shuffle``, a remainder smaller than ``size`` left out."""
    orders = [
        torch.randperm(rows, device=device) if shuffle and epoch > 0 else torch.arange(rows, device=device)
        for epoch in range(num_epochs)
    ]
    return torch.stack(orders)[:, : rows - rows % size].reshape(-1, size)


class StepGraph:
    """One gradient step (``step``, a function of ``StepBuffers``) over static buffers shaped like
    ``columns``: warmed up, captured and replayed when ``capture``, else run as it is."""

    WARMUP_STEPS = 3

    def __init__(
        self,
        step: Callable[[StepBuffers], Outputs],
        columns: TensorColumns,
        size: int,
        coefficients: dict,
        optimizers: list[torch.optim.Optimizer],
        capture: bool,
        row_values: tuple[str, ...],
    ):
        device = next(iter(columns.values())).device
        self.step, self.optimizers, self.capture = step, optimizers, capture
        self.signature = signature(columns, size, row_values)
        rows = len(next(iter(columns.values())))
        self.buffers = StepBuffers(
            columns={key: torch.empty_like(column) for key, column in columns.items()},
            index=torch.zeros(size, dtype=torch.int64, device=device),
            coefficients={key: torch.zeros((), device=device) for key in coefficients},
            nonfinite=torch.zeros((), dtype=torch.bool, device=device),
            row_outputs={key: torch.zeros(rows, device=device) for key in row_values},
        )
        # The learning rate the captured optimizer step reads: the param groups' floats, copied in each update
        self.learning_rates = [torch.zeros((), device=device) for o in optimizers for _ in o.param_groups]
        self.graph: torch.cuda.CUDAGraph | None = None
        self.failure: str | None = None  # why capture failed; the learner goes back to the eager update
        self.outputs: Outputs | None = None
        self.steps_warm = 0
        self.side_stream = torch.cuda.Stream(device) if capture else None

    def run(
        self, columns: TensorColumns, indices: torch.Tensor, coefficients: dict, row_outputs: TensorColumns
    ) -> tuple[Outputs, bool]:
        """One gradient step per row of ``indices`` (row numbers into ``columns``). Returns the
        last step's loss and metrics (copies) and whether any step's gradients held NaN/inf;
        copies the steps' per-row values into ``row_outputs``."""
        buffers = self.buffers
        for key, column in columns.items():
            buffers.columns[key].copy_(column)
        for key, value in coefficients.items():
            if isinstance(value, torch.Tensor):
                buffers.coefficients[key].copy_(value)
            else:
                buffers.coefficients[key].fill_(value)
        groups = [group for optimizer in self.optimizers for group in optimizer.param_groups]
        for lr, group in zip(self.learning_rates, groups):
            lr.fill_(group["lr"])
        buffers.nonfinite.zero_()
        for index in indices:
            buffers.index.copy_(index)
            if self.graph is None and self.capture and self.steps_warm >= self.WARMUP_STEPS:
                self._capture()
            if self.graph is not None:
                self.graph.replay()
            else:
                self._run_eagerly()
        for key, output in row_outputs.items():
            output.copy_(buffers.row_outputs[key])
        loss, metrics = self.outputs
        return (loss.clone(), {key: value.clone() for key, value in metrics.items()}), bool(buffers.nonfinite)

    def _run_eagerly(self) -> None:
        if self.side_stream is None:
            self.outputs = self.step(self.buffers)
        else:  # warm-up on a side stream, as the capture runs on one (torch's CUDA graph recipe)
            self.side_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side_stream):
                self.outputs = self.step(self.buffers)
            torch.cuda.current_stream().wait_stream(self.side_stream)
        self.steps_warm += 1

    def _capture(self) -> None:
        """Record the step. The optimizers read their learning rate from ``learning_rates`` and
        run capturable, for the capture only: outside it they step as configured."""
        groups = [group for optimizer in self.optimizers for group in optimizer.param_groups]
        saved = [(group["lr"], group.get("capturable")) for group in groups]
        for group, lr in zip(groups, self.learning_rates):
            group["lr"], group["capturable"] = lr, True
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)  # the gradients are allocated in the graph's memory
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                outputs = self.step(self.buffers)
        except Exception as error:  # noqa: BLE001 - any failure to capture means: run eagerly
            self.capture, self.failure = False, f"{type(error).__name__}: {error}"
            self.side_stream = None
            release_random_generator(self.buffers.nonfinite.device)
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)
            logger.warning("The gradient step could not be captured as a CUDA graph (%s): it runs eagerly", self.failure)
            return
        finally:
            for group, (lr, capturable) in zip(groups, saved):
                group["lr"] = lr
                if capturable is None:
                    del group["capturable"]
                else:
                    group["capturable"] = capturable
        self.graph, self.outputs = graph, outputs
        logger.info("The update's gradient step is captured as a CUDA graph: every later minibatch replays it")


def signature(columns: TensorColumns, size: int, row_values: tuple[str, ...]) -> tuple:
    """What fixes a graph's memory: the minibatch size, every column's name, shape and dtype, and
    the per-row values it writes."""
    return size, tuple((key, tuple(column.shape), column.dtype) for key, column in columns.items()), row_values
