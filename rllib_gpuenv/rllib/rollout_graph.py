"""The device env runner's rollout on a GPU: recorded once as a CUDA graph, replayed per rollout.

With the few dozen envs that train fastest, a rollout step on a GPU is host time: on the H100
lease a step of 32 envs took about 1.3 ms for the policy's forward pass, the action draw,
the env's kernel and the rollout's rows, a few dozen kernels launched from Python, each finished
in microseconds (the GPU was 2 % busy: benchmarks/RESULTS.md, "On a GPU"). A CUDA graph records
those launches once and replays the whole rollout in one call, as ``update_graph.py`` does for
the learners' gradient step (on the next H100 lease the main job sampled 492 k env-steps/s where
it had sampled 24 k, and reached 475 in 2.2 s where it had taken 9-11 s). What a recorded
rollout needs, and how ``RolloutGraph`` provides it:

* **Fixed memory.** The rollout's rows are the runner's ``Rollout`` buffers, reused from one
  rollout to the next; the env writes its outputs into buffers of its own; the policy's weights
  are updated in place. A graph is recorded for one set of them (``owners``) and again when they
  change, and dropped where the envs move under it (a reset, a restored checkpoint).
* **What carries over.** The first step reads what the last step of the rollout before wrote:
  the observations, which envs ended their episode, the running returns of envs without
  statistics (``carried``). The recording reads them from tensors of its own (``inputs``), into
  which each replay first copies the runner's current ones; after a replay the runner's are the
  tensors the last recorded step wrote (``outputs``).
* **No host sync and nothing that depends on Python values that change.** The device env
  runner's step reads nothing back. The step count a module may explore with (DQN's epsilon
  schedule) changes every step: the recording reads it from a device tensor the runner sets
  before each replay, for modules that take one (``explores_with_device_step``: DQN's computes
  its epsilon from it on the device); a module that draws its own actions from a Python step
  count is not recorded. Only this package's envs (``GPUVectorEnv``) are,
  whose step runs on torch's stream as one numba-cuda kernel or as torch ops that read nothing
  back on a GPU (a JAX env's runs on JAX's stream, a gymnasium env's on the host).

Recording executes nothing, so the rollout that records is replayed at once. Where recording
fails the runner logs why and goes on stepping each rollout from Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rllib_gpuenv.core.cuda_graphs import record_graph

Tensors = dict[str, torch.Tensor]


@dataclass
class RolloutGraph:
    """One recorded rollout: replay it with ``replay``."""

    graph: torch.cuda.CUDAGraph
    inputs: Tensors  # the carried state the first recorded step reads
    outputs: Tensors  # the carried state the last recorded step wrote
    result: object  # what the recorded steps returned, tensors each replay overwrites
    key: tuple  # values the recording holds fixed (the rollout's length, exploration)
    owners: tuple  # objects whose memory the recording reads and writes (buffers, module): kept alive here

    def holds(self, key: tuple, owners: tuple) -> bool:
        """Whether this recording is for ``key`` and these very ``owners``."""
        return self.key == key and len(owners) == len(self.owners) and all(a is b for a, b in zip(owners, self.owners))

    @classmethod
    def record(
        cls,
        steps: Callable[[], object],
        carried: Callable[[], Tensors],
        set_carried: Callable[[Tensors], None],
        key: tuple,
        owners: tuple,
        device: torch.device,
    ) -> RolloutGraph:
        """Record ``steps()`` (the rollout, from the state ``carried()`` returns) as a CUDA graph.
        Raises what recording raised, the runner's state left as it was."""
        inputs = {name: tensor.clone() for name, tensor in carried().items()}
        before = carried()
        set_carried(inputs)
        try:
            graph, result = record_graph(steps, device)
        except Exception:
            set_carried(before)  # a recording runs nothing: the state is where it was
            raise
        outputs = carried()
        set_carried(inputs)  # for the replay that follows: the inputs hold the state before the rollout
        return cls(graph, inputs, outputs, result, key, owners)

    def replay(self, carried: Callable[[], Tensors], set_carried: Callable[[Tensors], None]) -> object:
        """One rollout from the runner's current state: its carried tensors copied in, the graph
        replayed, the runner left on the tensors the last step wrote. Returns ``result``."""
        for name, now in carried().items():
            if now is not self.inputs[name]:
                self.inputs[name].copy_(now)
        self.graph.replay()
        set_carried(self.outputs)
        return self.result
