"""The lean update: RLlib's learner API and its losses' math, without its per-minibatch machinery.

RLlib's ``Learner.update`` turns every minibatch into a ``MultiAgentBatch`` (slicing, converting
and checking it), calls a chain of hooks, and logs a dozen metrics per minibatch into its
``MetricsLogger``; on a small network that costs about as much as the gradient step itself
(benchmarks/RESULTS.md, "The lean update"). The data here is already a dict of tensors on the
learner's device, so ``LeanUpdate.lean_update`` runs the epochs × minibatches loop over it with
only what the math needs: a permutation per epoch drawn on the device (none for the first, as
in RLlib), minibatches taken by indexing, the loss, ``backward``, RLlib's gradient clipping (in
place, in a few ops) and the optimizer step. Metrics are logged once per update, with RLlib's
keys and RLlib's meaning (its loss metrics and gradient norms are logged with ``window=1``, so
what it reports is the last minibatch's: so here), and RLlib's
``before_/after_gradient_based_update`` hooks run as in its ``update`` (learning-rate and
entropy schedules, PPO's KL coefficient, DQN's target network).

The learner decides per update whether the lean path applies (``lean_update_applies``): it
needs a single module, no ``torch_compile_learner``, no AMP grad scalers, and the algorithm's
own loss (a subclass that overrides ``compute_loss_for_module`` keeps RLlib's update; one that
overrides ``postprocess_gradients(_for_module)`` has it called on every gradient step).

On a GPU the gradient step is captured once as a CUDA graph and replayed for every minibatch
(``update_graph.py``; ``cuda_graphs=False`` in the config turns it off).
"""

from __future__ import annotations

import logging

import torch
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import Learner
from ray.rllib.utils.metrics import (
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.torch_utils import compute_global_norm

from rllib_gpuenv.rllib.update_graph import Outputs, StepBuffers, StepGraph, minibatch_rows, signature

logger = logging.getLogger(__name__)

TensorColumns = dict[str, torch.Tensor]  # column name -> equal-length tensors on the learner's device


class LeanUpdate:
    """Mixin for an RLlib ``TorchLearner``. The learner supplies ``lean_loss`` (its algorithm's
    loss, returning the total loss and the metrics RLlib's loss logs) and the class whose
    ``compute_loss_for_module`` that loss reproduces (``lean_loss_of``)."""

    lean_loss_of: type  # the RLlib learner class whose loss ``lean_loss`` computes
    # Device types whose updates run through ``StepGraph``: captured on CUDA; tests add "cpu" to
    # run the same static-buffer step uncaptured.
    graph_step_devices: tuple[str, ...] = ("cuda",)
    _step_graph: StepGraph | None = None
    _step_graph_failure: str | None = None  # why capture failed: eager updates from then on
    _step_graph_changes = 0  # graphs replaced because the update's shapes changed
    MAX_GRAPH_CHANGES = 3  # shapes that keep changing (each a new capture) make the eager loop cheaper

    def lean_loss(
        self,
        module_id: str,
        config,
        batch: TensorColumns,
        fwd_out: dict,
        metrics: bool,
        coefficients: dict,
        row_values: tuple[str, ...] = (),
    ) -> tuple[torch.Tensor, dict]:
        """The total loss of one minibatch, and (if ``metrics``, else ``{}``) what RLlib's loss
        logs, detached. The eager loop asks only the update's last minibatch for metrics.
        ``coefficients`` holds ``lean_coefficients``' values (device tensors in a captured step).
        Whatever ``metrics`` says, the returned dict also holds the per-row values named in
        ``row_values`` (detached, one per row of ``batch``), for ``lean_update``'s ``row_outputs``."""
        raise NotImplementedError

    def lean_coefficients(self, module_id: str) -> dict:
        """The scalars ``lean_loss`` reads that can change between updates (schedules, adaptive
        coefficients), as floats or tensors: a captured step reads them from device tensors."""
        return {}

    def lean_update_applies(self) -> bool:
        """Whether ``lean_update`` computes what RLlib's ``update`` would (see the module doc)."""
        config = self.config
        return (
            getattr(config, "lean_update", True)
            and not config.torch_compile_learner
            and self._grad_scalers is None
            and list(self.module.keys()) == [DEFAULT_MODULE_ID]
            and type(self).compute_loss_for_module is self.lean_loss_of.compute_loss_for_module
        )

    def lean_update(
        self,
        columns: TensorColumns,
        *,
        timesteps: dict | None,
        num_epochs: int,
        minibatch_size: int | None,
        shuffle: bool,
        env_steps: int | None = None,
        row_outputs: TensorColumns | None = None,
    ) -> dict:
        """``num_epochs`` passes over ``columns`` (equal-length tensors on this learner's device)
        in minibatches of ``minibatch_size`` (None: the whole batch): the first epoch in the batch's
        order and, if ``shuffle``, every later one shuffled, as RLlib's iterator does. Returns
        RLlib's reduced metrics, as ``Learner.update`` does.

        ``row_outputs`` (name -> a tensor with a value per row of ``columns``) receive, at each
        gradient step, the loss's per-row values of those names for that step's rows, as they
        were before the step (a row in several steps keeps its last): prioritized replay's TD
        errors come from the loss this way, as RLlib's DQN takes them from its loss."""
        module_id = DEFAULT_MODULE_ID
        config = self.config.get_config_for_module(module_id)
        timesteps = timesteps or {}
        self._check_is_built()
        self.before_gradient_based_update(timesteps=timesteps)
        self._weights_seq_no += 1
        rows = len(next(iter(columns.values())))
        size = minibatch_size or rows
        starts = range(0, rows - size + 1, size)
        module = self.module[module_id]
        module.train()  # what RLlib's ``forward_train`` does before every ``_forward_train``: once is enough
        coefficients = self.lean_coefficients(module_id)
        row_outputs = row_outputs or {}
        row_values = tuple(row_outputs)
        graph = self._graph_for(columns, size, coefficients, row_values)
        if graph is not None:
            indices = minibatch_rows(rows, size, num_epochs, shuffle, self._device)
            (loss, loss_metrics), nonfinite = graph.run(columns, indices, coefficients, row_outputs)
            if nonfinite:
                logger.warning("Gradients held NaN/inf values in this update; they were set to zero, as RLlib does")
            if graph.failure is not None:
                self._step_graph, self._step_graph_failure = None, graph.failure
        for epoch in range(num_epochs if graph is None else 0):
            order = torch.randperm(rows, device=self._device) if shuffle and epoch > 0 else None  # RLlib's order
            for start in starts:
                index = slice(start, start + size) if order is None else order[start : start + size]
                minibatch = {key: column[index] for key, column in columns.items()}
                fwd_out = module._forward_train(minibatch)  # under DDP (several learners) through DDP's forward
                last = epoch == num_epochs - 1 and start == starts[-1]
                loss, loss_metrics = self.lean_loss(module_id, config, minibatch, fwd_out, last, coefficients, row_values)
                for key, output in row_outputs.items():
                    output[index] = loss_metrics.pop(key)
                norms = self.gradient_step(loss)
                if last:
                    loss_metrics.update(norms)  # RLlib logs them every step with window=1: the last step's
        steps = num_epochs * len(starts)
        self._log_update(module_id, loss, loss_metrics, size, steps, env_steps if env_steps is not None else rows)
        self.after_gradient_based_update(timesteps=timesteps)
        return self.metrics.reduce()

    def gradient_step(self, loss: torch.Tensor) -> dict[str, torch.Tensor]:
        """``backward`` and one optimizer step: RLlib's gradient postprocessing (clipping by
        ``grad_clip``/``grad_clip_by``), done in place by ``_clip_on_device`` unless the learner
        postprocesses gradients its own way, then the learner's ``apply_gradients``. Returns the
        global norms that RLlib's postprocessing logs (none where RLlib's ran: it logged them)."""
        for optimizer in self._optimizer_parameters:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gradients = {pid: p.grad for pid, p in self._params.items()}
        if self._own_gradient_postprocessing():
            self.apply_gradients(self.postprocess_gradients(gradients))
            return {}
        norms = self._clip_on_device(DEFAULT_MODULE_ID, self.config.get_config_for_module(DEFAULT_MODULE_ID))
        self.apply_gradients(gradients)
        return norms

    def _own_gradient_postprocessing(self) -> bool:
        """Whether the learner overrides RLlib's gradient postprocessing, which ``_clip_on_device`` replaces."""
        cls = type(self)
        return (
            cls.postprocess_gradients is not Learner.postprocess_gradients
            or cls.postprocess_gradients_for_module is not Learner.postprocess_gradients_for_module
        )

    def _graph_for(
        self, columns: TensorColumns, size: int, coefficients: dict, row_values: tuple[str, ...]
    ) -> StepGraph | None:
        """The ``StepGraph`` for this update's shapes, or None where the eager loop runs: another
        device, ``cuda_graphs=False``, several learners (DDP's all-reduce), torch lr schedulers,
        gradient postprocessing of the learner's own, after a failed capture, or once the shapes
        have changed more than ``MAX_GRAPH_CHANGES`` times."""
        config = self.config
        if not (
            getattr(config, "cuda_graphs", True)
            and self._device.type in self.graph_step_devices
            and config.num_learners <= 1
            and self._lr_scheduler_classes is None
            and self._step_graph_failure is None
            and not self._own_gradient_postprocessing()
        ):
            return None
        optimizers = list(self._optimizer_parameters)
        graph = self._step_graph
        if graph is None or graph.signature != signature(columns, size, row_values) or graph.optimizers != optimizers:
            self._step_graph = None  # the old graph's memory goes first
            if graph is not None:
                self._step_graph_changes += 1
            if self._step_graph_changes > self.MAX_GRAPH_CHANGES:
                self._step_graph_failure = f"the update's shapes changed {self._step_graph_changes} times"
                logger.warning("The gradient step is no longer captured as a CUDA graph: %s", self._step_graph_failure)
                return None
            capture = self._device.type == "cuda"
            self._step_graph = StepGraph(
                self._graph_step, columns, size, coefficients, optimizers, capture=capture, row_values=row_values
            )
        return self._step_graph

    def _graph_step(self, buffers: StepBuffers) -> Outputs:
        """``gradient_step`` on the minibatch ``buffers.index`` of ``buffers.columns``, with
        nothing that reads back from the device: RLlib's clipping (``_clip_on_device``) and
        its zeroing of NaN/inf gradients, the optimizers stepped directly. Metrics every step;
        the per-row values written into ``buffers.row_outputs`` at the step's rows."""
        module_id = DEFAULT_MODULE_ID
        config = self.config.get_config_for_module(module_id)
        minibatch = {key: column[buffers.index] for key, column in buffers.columns.items()}
        fwd_out = self.module[module_id]._forward_train(minibatch)
        row_values = tuple(buffers.row_outputs)
        loss, metrics = self.lean_loss(module_id, config, minibatch, fwd_out, True, buffers.coefficients, row_values)
        for key, output in buffers.row_outputs.items():
            output.index_copy_(0, buffers.index, metrics.pop(key))
        for optimizer in self._optimizer_parameters:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        metrics.update(self._clip_on_device(module_id, config))
        grads = [p.grad for p in self._params.values() if p.grad is not None]
        buffers.nonfinite.logical_or_(~torch.stack([g.isfinite().all() for g in grads]).all())
        if not self.config.torch_skip_nan_gradients:
            for grad in grads:
                grad.nan_to_num_()
        for optimizer in self._optimizer_parameters:
            optimizer.step()
        return loss.detach(), metrics

    def _clip_on_device(self, module_id: str, config) -> dict[str, torch.Tensor]:
        """RLlib's ``postprocess_gradients_for_module``, in place, in a few ops (RLlib's takes
        four per gradient tensor and builds dicts keyed by tensors: on a CPU 0.1 ms of a 64x64
        network's 1.3 ms step) and without a host sync (its "norm" mode compares on the host);
        returns the global norms it logs."""
        logged = {}
        clip, by = config.grad_clip, config.grad_clip_by
        if not clip and not config.log_gradients:
            return logged
        for name, optimizer in self.get_optimizers_for_module(module_id):
            # A torch learner's parameter references are the parameters themselves.
            grads = [p.grad for p in self._optimizer_parameters[optimizer] if p.grad is not None]
            if clip and by == "value":
                for grad in grads:
                    grad.clamp_(-clip, clip)
            elif clip and by == "norm":
                for grad in grads:
                    norm = grad.norm(2).nan_to_num(neginf=-10e8, posinf=10e8)
                    grad.mul_(torch.where(norm > clip, clip / norm, 1.0))
            key = f"gradients_{name}_global_norm"
            if clip and by == "global_norm":
                logged[key] = _clip_by_global_norm(grads, clip)
            elif config.log_gradients:
                logged[key] = compute_global_norm(grads)
        return logged

    def set_state(self, state: dict) -> None:
        self._step_graph = None  # loading the optimizers' state makes new tensors: a graph would step the old ones
        super().set_state(state)

    def _log_update(self, module_id, loss, loss_metrics: dict, size: int, steps: int, env_steps: int) -> None:
        """What RLlib's ``update`` logs over ``steps`` minibatches of ``size`` rows, logged once."""
        log = self.metrics.log_value
        self.metrics.log_dict(loss_metrics, key=module_id, window=1)
        log((module_id, Learner.TOTAL_LOSS_KEY), loss.detach(), window=1)
        log((module_id, WEIGHTS_SEQ_NO), self._weights_seq_no, window=1)
        log((module_id, MODULE_TRAIN_BATCH_SIZE_MEAN), size, reduce="mean")
        trained = size * steps
        log((module_id, NUM_MODULE_STEPS_TRAINED), trained, reduce="sum")
        log((module_id, NUM_MODULE_STEPS_TRAINED_LIFETIME), trained, reduce="lifetime_sum", with_throughput=True)
        log((ALL_MODULES, NUM_MODULE_STEPS_TRAINED), trained, reduce="sum", with_throughput=True)
        log((ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), trained, reduce="lifetime_sum", with_throughput=True)
        # RLlib's minibatches each carry the env steps of the whole batch (``MiniBatchCyclicIterator``),
        # so its env-steps-trained count is that times the minibatches: the same count here.
        log((ALL_MODULES, NUM_ENV_STEPS_TRAINED), env_steps * steps, reduce="sum", with_throughput=True)
        log((ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME), env_steps * steps, reduce="lifetime_sum", with_throughput=True)


def _clip_by_global_norm(grads: list[torch.Tensor], clip: float) -> torch.Tensor:
    """RLlib's ``clip_gradients(..., grad_clip_by="global_norm")`` (the same norm, infinities
    capped alike, the same coefficient), in a handful of ops where RLlib's takes four per
    gradient tensor: on a CPU those ~40 small ops cost a tenth of a 64x64 network's step."""
    if not grads:
        return torch.tensor(0.0)
    norms = torch.stack(torch._foreach_norm(grads, 2.0)).nan_to_num(neginf=-10e8, posinf=10e8)
    total = torch.linalg.vector_norm(norms, 2.0).nan_to_num(neginf=-10e8, posinf=10e8)
    coefficient = (clip / torch.clamp(total + 1e-6, min=clip)).clamp(max=1.0)
    torch._foreach_mul_(grads, coefficient)
    return total
