"""The numba CPU backend: the core step compiled to vectorised machine code, in parallel.

A step is two parallel loops over the envs (``prange`` splits them across the threads):

1. ``begin_episode`` for the envs whose episode ended last step (NEXT_STEP autoreset), found
   eight at a time by reading the done flags as 64-bit words: with random actions ~5% of envs
   reset per step, and the initial-state hash is too costly to compute for every env;
2. ``advance_env`` for every env, which LLVM turns into vector code (several envs per
   instruction): the state is structure-of-arrays, the step is branch-free, the parameters are
   constants and float32 trigonometry is polynomial (``core/ops.py``). This needs numba's
   ``error_model="numpy"`` (Python's would check every division for zero and leave the loop).

Float32 envs get float32 arithmetic (``single_precision``) and fast-math (fused multiply-adds,
reciprocal division, reassociation: results move by ulps); float64 envs get libm trigonometry
and exact IEEE arithmetic, so that they match gymnasium's float64 physics to the last bits.

Kernels are compiled when the env is made (``load``), not in its first step, and cached on disk
by numba (a kernel's name carries a digest of the sources and parameters it was built from, so
an edit compiles afresh rather than loading a stale kernel).

Threads: ``num_threads`` fixes them (a user's count always wins). By default the backend
starts with one thread per ``ENVS_PER_THREAD`` (4096) envs, at least one, at most the CPUs this
process may run on (its affinity mask): fewer than 8192 envs start on one thread, because
starting a parallel region costs more than stepping a few thousand cheap envs serially
(benchmarks/RESULTS.md, "numba-cpu threads by num_envs": on 2 cores two threads are slower up
to 4096 CartPoles and 1.5x faster from 16384). From there it moves to whichever count, up to
those CPUs, steps fastest now (``ThreadTuner``): a costlier env (Acrobot's RK4 is 1.5-1.8x faster
on two threads from 256 envs) gets its threads after a few hundred steps, and on a machine whose
other cores are busy one thread can beat two, since a parallel region waits for its slowest
thread.

The device env runner passes a remote runner's ``num_cpus_per_env_runner``, and for envs
stepped in the learner's own process (the driver's runner with ``num_env_runners=0`` and a local
learner) a fixed half of this default (``learner_process_threads``), so that the env's threads
do not fight the learner's torch threads, which no env-step timing sees: there, every core cost
RLlib's DQN example 55 s to iteration 10 against 41 s with one thread (issue 28, 2 cores).
"""

from __future__ import annotations

import logging
import os
import threading
import time

import numba
import numpy as np
import torch
from numba import prange

from rllib_gpuenv.backends.base import Backend
from rllib_gpuenv.backends.compile_log import log_first_call
from rllib_gpuenv.core.buffers import EnvBuffers, StepConstants, StepOutputs
from rllib_gpuenv.core.jit import bind, use_numba
from rllib_gpuenv.core.step import BoundEnv, KernelArguments

logger = logging.getLogger(__name__)
use_numba()

# Without the NaN/inf assumptions of full fast-math: bad states must still compare as bad.
FASTMATH = {"contract", "arcp", "reassoc", "afn"}
BEGIN_EPISODE = ADVANCE_ENV = None  # bound per env


def step_all(
    actions,
    state,
    array,
    steps,
    prev_done,
    done_words,
    episode,
    ep_return,
    obs,
    reward,
    terminated,
    truncated,
    final_return,
    final_length,
    final_mask,
    seed32,
    lows,
    highs,
    max_steps,
):
    n = state.shape[1]
    for w in prange(done_words.shape[0]):  # done_words views prev_done[:8 * len] as words
        if done_words[w]:
            for i in range(8 * w, 8 * w + 8):
                if prev_done[i]:
                    BEGIN_EPISODE(i, state, array, episode, seed32, lows, highs)
    for i in range(8 * done_words.shape[0], n):
        if prev_done[i]:
            BEGIN_EPISODE(i, state, array, episode, seed32, lows, highs)
    for i in prange(n):
        ADVANCE_ENV(
            i,
            actions,
            state,
            array,
            steps,
            prev_done,
            ep_return,
            obs,
            reward,
            terminated,
            truncated,
            final_return,
            final_length,
            final_mask,
            max_steps,
        )


_KERNELS: dict = {}


def kernel_for(env: BoundEnv, dtype: torch.dtype):
    """The compiled step of ``env`` for state of ``dtype`` (built once per process)."""
    key = (env.definition, env.params, dtype)  # the definition itself: one registered again under its id is another
    if key not in _KERNELS:
        name = env.kernel_name("step_all", dtype)
        begin_episode, advance_env = env.kernel_functions(dtype)
        fn = bind(step_all, name=name or "step_all", BEGIN_EPISODE=begin_episode, ADVANCE_ENV=advance_env)
        options = dict(parallel=True, nogil=True, cache=name is not None, error_model="numpy")
        if dtype == torch.float32:
            options["fastmath"] = FASTMATH
        _KERNELS[key] = numba.njit(**options)(fn)
    return _KERNELS[key]


def _kernel_array(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view for the kernel; bool arrays as uint8 (numba's alias analysis treats bool
    values as possible aliases, which would keep the env loop from being vectorised)."""
    array = tensor.numpy()
    return array.view(np.uint8) if array.dtype == np.bool_ else array


def _new_outputs(like: StepOutputs) -> tuple[StepOutputs, dict[str, np.ndarray]]:
    """New output tensors shaped like ``like``, and their kernel views.

    numpy allocates them and torch shares the memory, which costs a third of the other way
    round (benchmarks/RESULTS.md, "How numba-cpu got to 9x gymnasium": "Allocation").
    """
    arrays, tensors = {}, []
    for name, t in zip(StepOutputs._fields, like):
        if t.dtype == torch.bool:
            array = arrays[name] = _empty_like(t, np.uint8)
            tensors.append(torch.from_numpy(array.view(np.bool_)))
        else:
            array = arrays[name] = _empty_like(t, _NUMPY_DTYPES[t.dtype])
            tensors.append(torch.from_numpy(array))
    return StepOutputs(*tensors), arrays


def _empty_like(tensor: torch.Tensor, dtype) -> np.ndarray:
    """An uninitialised array shaped and laid out in memory as ``tensor`` (an env-by-env array
    observation stays env by env)."""
    order = sorted(range(tensor.dim()), key=lambda k: -tensor.stride(k))  # outermost dimension first
    return np.empty([tensor.shape[k] for k in order], dtype).transpose(np.argsort(order))


_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int32: np.int32}


_threads_set = threading.local()  # numba's thread count is per calling thread


def use_threads(count: int) -> None:
    """Run this thread's next parallel regions on ``count`` threads. ``numba.set_num_threads``
    costs a microsecond (a few % of a small step), so it is called only when the count differs
    from the one the backends last set here; a count set meanwhile by other code would change
    the speed of a step, never its results."""
    if getattr(_threads_set, "count", None) != count:
        numba.set_num_threads(count)
        _threads_set.count = count


ENVS_PER_THREAD = 4096  # fewer envs per thread: a parallel region costs more than it saves


def default_num_threads(num_envs: int | None = None) -> int:
    """The CPUs this process may run on (its affinity mask: what Ray, taskset or a container
    gave it), at most numba's thread pool, and, given ``num_envs``, at most one thread per
    ``ENVS_PER_THREAD`` envs (at least one)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    threads = max(1, min(cpus, numba.config.NUMBA_NUM_THREADS))
    return threads if num_envs is None else max(1, min(threads, num_envs // ENVS_PER_THREAD))


def learner_process_threads(num_envs: int) -> int:
    """Threads for envs stepped in the same process as a learner: half the default, at least
    one (the learner's torch threads need the rest)."""
    return max(1, default_num_threads(num_envs) // 2)


class ThreadTuner:
    """The thread count that steps fastest now, among ``1..maximum``: measured, not assumed.

    Mostly it uses the best count so far; every ``explore_every`` steps it tries a neighbouring
    count for ``trial`` steps, and keeps whichever has the lower recent time per step (an
    exponential average, so that the machine's load may change). The results do not depend on
    the count: every env is computed on its own. A trial of a worse count costs its steps up to
    twice their time, so trials are rare: 2 steps in 258 (< 1 % of the time).
    """

    def __init__(
        self, maximum: int, explore_every: int = 256, trial: int = 2, smoothing: float = 0.25, start: int | None = None
    ):
        self.maximum, self.explore_every, self.trial, self.smoothing = maximum, explore_every, trial, smoothing
        self.best = maximum if start is None else max(1, min(start, maximum))
        self.seconds: dict[int, float] = {}
        self._count = 0
        self._trying: int | None = None
        self._trial_left = 0
        self._direction = -1

    def threads(self) -> int:
        """The count to use for the next step."""
        if self.maximum == 1:
            return 1
        if self._trying is None and self._count >= self.explore_every:
            self._count = 0
            candidate = self.best + self._direction
            if not 1 <= candidate <= self.maximum:
                self._direction = -self._direction
                candidate = self.best + self._direction
            self._trying, self._trial_left = candidate, self.trial
        return self.best if self._trying is None else self._trying

    def record(self, threads: int, seconds: float) -> None:
        """How long a step with ``threads`` threads took."""
        old = self.seconds.get(threads)
        self.seconds[threads] = seconds if old is None else old + self.smoothing * (seconds - old)
        self._count += 1
        if self._trying is not None:
            self._trial_left -= 1
            if self._trial_left <= 0:
                if self.seconds[self._trying] < self.seconds.get(self.best, float("inf")):
                    self.best = self._trying
                else:
                    self._direction = -self._direction
                self._trying = None


class NumbaCPUBackend(Backend):
    name = "numba-cpu"
    envs_first_memory = True

    def __init__(self, env: BoundEnv, num_envs: int, device: torch.device, dtype: torch.dtype, num_threads: int | None = None):
        if device.type != "cpu":
            raise ValueError(
                f"backend 'numba-cpu' runs on the CPU, but device={device} was asked for: "
                "use device='cpu', or backend='numba-cuda' or 'torch' for a GPU"
            )
        super().__init__(env, num_envs, device, dtype)
        limit = numba.config.NUMBA_NUM_THREADS
        if num_threads is not None and not (isinstance(num_threads, int) and 1 <= num_threads <= limit):
            raise ValueError(f"num_threads must be an integer in 1..{limit} (numba's thread pool), got {num_threads!r}")
        self.num_threads = num_threads or default_num_threads()
        # Start from one thread per ENVS_PER_THREAD envs; the tuner tries more where they pay (costlier envs).
        self._tuner = None if num_threads is not None else ThreadTuner(self.num_threads, start=default_num_threads(num_envs))
        self._kernel = kernel_for(env, dtype)
        self._arguments = KernelArguments(self._kernel.py_func)
        self._outputs = StepOutputs.allocate(env.definition.obs_shape, num_envs, dtype, device, self.envs_first_memory)
        self._out_arrays = {name: _kernel_array(t) for name, t in self._outputs._asdict().items()}
        self._prepared_for = None  # (buffers, constants) the prepared arguments hold

    def load(self, buffers: EnvBuffers, constants: StepConstants, actions: torch.Tensor) -> None:
        """Compile the kernel for the arguments a step passes, or load it from numba's cache. The
        first kernel a process loads also starts numba's CPU target (about half a second on a
        2-core CPU), which would otherwise fall in the first step."""
        self._prepare(buffers, constants)
        args = self._arguments.fill(actions=actions.numpy())
        signature = tuple(self._kernel.typeof_pyval(arg) for arg in args)  # as a call types them
        what = f"numba-cpu step of {self.env.definition.id} ({str(self.dtype).replace('torch.', '')})"
        log_first_call(self._kernel, args, what, call=lambda: self._kernel.compile(signature))

    def _prepare(self, buffers: EnvBuffers, constants: StepConstants) -> None:
        """Numpy views of the buffers and the constants, made when they change, not every step."""
        arrays = {name: _kernel_array(t) for name, t in self.kernel_tensors(buffers).items()}
        flags = arrays["prev_done"]
        arrays["done_words"] = flags[: flags.size // 8 * 8].view(np.uint64)  # 8 done flags per word
        self._arguments.prepare(actions=None, **arrays, **self._out_arrays, **constants._asdict())
        self._prepared_for = (buffers, constants)

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, constants: StepConstants, fresh: bool) -> StepOutputs:
        if self._prepared_for is None or self._prepared_for[0] is not buffers or self._prepared_for[1] is not constants:
            self._prepare(buffers, constants)
        outputs = self._outputs
        if fresh:  # write straight into new tensors rather than copy persistent ones
            outputs, out_arrays = _new_outputs(outputs)
            args = self._arguments.fill(actions=actions.numpy(), **out_arrays)
        else:
            args = self._arguments.fill(actions=actions.numpy())
        threads = self.num_threads if self._tuner is None else self._tuner.threads()
        use_threads(threads)
        start = time.perf_counter()
        self._kernel(*args)
        if self._tuner is not None:
            self._tuner.record(threads, time.perf_counter() - start)
        return outputs

    @property
    def threads_in_use(self) -> int:
        """The thread count steps run with now."""
        return self.num_threads if self._tuner is None else self._tuner.best
