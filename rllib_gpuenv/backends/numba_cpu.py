"""The numba CPU backend: the shared per-env step compiled to vectorised machine code.

A step is two parallel loops over the envs (``prange`` splits them across cores):

1. ``begin_episode`` for the envs whose episode ended last step (NEXT_STEP autoreset), found
   eight at a time by reading the done flags as 64-bit words: with random actions ~5% of envs
   reset per step, and the initial-state hash is too costly to compute for every env;
2. ``advance_env`` for every env, which LLVM turns into AVX2 code (4 envs per instruction):
   the state is structure-of-arrays, the step is branch-free and the trigonometry is
   polynomial (``physics.sin_cos``). This needs numba's ``error_model="numpy"`` (Python's would
   check every division for zero and leave the loop on error) and a kernel compiled for one
   sub-step (a loop over sub-steps inside the env loop would keep LLVM from vectorising it).

Float32 envs get float32 arithmetic (``single_precision``; still 4 envs per instruction, as
the loop's integers are 64-bit and LLVM sizes the vector by its widest type) and fast-math
(fused multiply-adds, reciprocal division, reassociation; results move by ulps); float64 envs
get libm trigonometry and exact IEEE arithmetic, so that they match gymnasium's float64
physics within 1e-9 over whole episodes (their loop stays scalar).
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import prange

from rllib_gpuenv._jit import single_precision
from rllib_gpuenv.backends import kernel_cache
from rllib_gpuenv.backends.base import Backend, EnvBuffers, StepOutputs, StepParams
from rllib_gpuenv.backends.numba_kernel import advance_env, begin_episode, kernel_constants

# Without the NaN/inf assumptions of full fast-math: bad states must still compare as bad.
FASTMATH = {"contract", "arcp", "reassoc", "afn"}

kernel_cache.drop_if_stale(__file__)


def _make_kernel(exact_math: int, one_substep: bool):
    """Compile the step for float64 (``exact_math``) or float32 envs, for one or any number of
    sub-steps. Both are compile-time constants: a libm call or a sub-step loop inside the env
    loop would keep LLVM from vectorising it."""

    def step_all(actions, state, steps, prev_done, done_words, episode, ep_return, obs, reward,
                 terminated, truncated, final_return, final_length, final_mask,
                 seed32, low, high, max_steps, substeps, sutton_barto, dt):  # fmt: skip
        substeps = 1 if one_substep else substeps
        n = state.shape[1]
        for w in prange(done_words.shape[0]):  # done_words views prev_done[:8 * len] as words
            if done_words[w]:
                for i in range(8 * w, 8 * w + 8):
                    if prev_done[i]:
                        begin_episode(i, state, episode, seed32, low, high)
        for i in range(8 * done_words.shape[0], n):
            if prev_done[i]:
                begin_episode(i, state, episode, seed32, low, high)
        for i in prange(n):
            advance_env(i, actions, state, steps, prev_done, ep_return, obs, reward, terminated,
                        truncated, final_return, final_length, final_mask,
                        max_steps, substeps, sutton_barto, dt, exact_math)  # fmt: skip

    if exact_math:
        return numba.njit(parallel=True, nogil=True, cache=True, error_model="numpy")(step_all)
    return numba.njit(parallel=True, nogil=True, cache=True, error_model="numpy", fastmath=FASTMATH)(single_precision(step_all))


KERNELS = {(exact, one): _make_kernel(exact, one) for exact in (0, 1) for one in (False, True)}


def _kernel_array(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view for the kernel; bool arrays as uint8 (numba's alias analysis treats bool
    values as possible aliases, which would keep the env loop from being vectorised)."""
    array = tensor.numpy()
    return array.view(np.uint8) if array.dtype == np.bool_ else array


_KERNEL_DTYPES = {torch.float32: np.float32, torch.int32: np.int32, torch.bool: np.uint8}


def _new_outputs(like: StepOutputs) -> tuple[StepOutputs, tuple[np.ndarray, ...]]:
    """New output tensors shaped like ``like``, and their kernel views.

    numpy allocates them and torch shares the memory: 7 ``np.empty`` + ``torch.from_numpy``
    take ~8 µs, 7 ``torch.empty`` + ``.numpy()`` ~22 µs, in a step of ~300 µs at 65,536 envs.
    """
    arrays = tuple(np.empty(t.shape, _KERNEL_DTYPES[t.dtype]) for t in like)
    tensors = (torch.from_numpy(a.view(np.bool_) if t.dtype == torch.bool else a) for a, t in zip(arrays, like))
    return StepOutputs(*tensors), arrays


class NumbaCPUBackend(Backend):
    name = "numba-cpu"

    def __init__(self, num_envs: int, device: torch.device, dtype: torch.dtype):
        if device.type != "cpu":
            raise ValueError(
                f"backend 'numba-cpu' runs on the CPU, but device={device} was asked for: "
                "use device='cpu', or backend='numba-cuda' or 'torch' for a GPU"
            )
        super().__init__(num_envs, device, dtype)
        self._outputs = StepOutputs.allocate(num_envs, device)
        self._out_arrays = tuple(_kernel_array(t) for t in self._outputs)
        self._buffers_id = None
        self._buf_arrays: tuple[np.ndarray, ...] = ()

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, params: StepParams, fresh: bool) -> StepOutputs:
        if self._buffers_id != id(buffers):  # numpy views are made once, not every step
            arrays = [_kernel_array(t) for t in buffers.tensors()]
            flags = arrays[2]  # prev_done
            arrays.insert(3, flags[: flags.size // 8 * 8].view(np.uint64))
            self._buf_arrays = tuple(arrays)
            self._buffers_id = id(buffers)
        outputs, out_arrays = self._outputs, self._out_arrays
        if fresh:  # write straight into new tensors rather than copy persistent ones
            outputs, out_arrays = _new_outputs(outputs)
        kernel = KERNELS[params.exact_math, params.substeps == 1]
        kernel(actions.numpy(), *self._buf_arrays, *out_arrays, *kernel_constants(params))
        return outputs
