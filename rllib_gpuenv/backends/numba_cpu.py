"""The numba CPU backend: ``step_env`` compiled to machine code, envs split across cores.

Two compilations of one loop: float32 envs get fast-math (fused multiply-adds, reciprocal
division, reassociation; ~1.5x faster, results move by ulps), float64 envs get exact IEEE
arithmetic, so that they match gymnasium's float64 physics within 1e-9 over whole episodes.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import prange

from rllib_gpuenv.backends import kernel_cache
from rllib_gpuenv.backends.base import Backend, EnvBuffers, StepOutputs, StepParams
from rllib_gpuenv.backends.numba_kernel import step_env

# Without the NaN/inf assumptions of full fast-math: bad states must still compare as bad.
FASTMATH = {"contract", "arcp", "reassoc", "afn"}

kernel_cache.drop_if_stale(__file__)


def _step_all(actions, state, steps, prev_done, episode, ep_return, ep_length, obs, reward,
              terminated, truncated, final_return, final_length, final_mask,
              seed32, low, high, max_steps, substeps, sutton_barto, dt, exact_math):  # fmt: skip
    for i in prange(state.shape[0]):
        step_env(i, actions, state, steps, prev_done, episode, ep_return, ep_length, obs,
                 reward, terminated, truncated, final_return, final_length, final_mask,
                 seed32, low, high, max_steps, substeps, sutton_barto, dt, exact_math)  # fmt: skip


step_all_fast = numba.njit(parallel=True, nogil=True, cache=True, fastmath=FASTMATH)(_step_all)
step_all_exact = numba.njit(parallel=True, nogil=True, cache=True)(_step_all)


class NumbaCPUBackend(Backend):
    name = "numba-cpu"
    reuses_outputs = True

    def __init__(self, num_envs: int, device: torch.device, dtype: torch.dtype):
        if device.type != "cpu":
            raise ValueError(
                f"backend 'numba-cpu' runs on the CPU, but device={device} was asked for: "
                "use device='cpu', or backend='numba-cuda' or 'torch' for a GPU"
            )
        super().__init__(num_envs, device, dtype)
        self._kernel = step_all_fast if dtype == torch.float32 else step_all_exact
        self._outputs = StepOutputs.allocate(num_envs, device)
        self._out_arrays = tuple(t.numpy() for t in self._outputs)
        self._buffers_id = None
        self._buf_arrays: tuple[np.ndarray, ...] = ()

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, params: StepParams) -> StepOutputs:
        if self._buffers_id != id(buffers):  # numpy views are made once, not every step
            self._buf_arrays = tuple(t.numpy() for t in buffers.tensors())
            self._buffers_id = id(buffers)
        self._kernel(actions.numpy(), *self._buf_arrays, *self._out_arrays,
                     params.seed32, params.low, params.high, params.max_steps, params.substeps,
                     params.sutton_barto, params.dt, params.exact_math)  # fmt: skip
        return self._outputs
