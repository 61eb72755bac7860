"""The numba CUDA backend: one GPU thread per environment running the core step.

The kernel works on the env's torch CUDA tensors in place, through
``__cuda_array_interface__`` (no copies), and is launched on torch's current stream without
the implicit synchronisation numba performs by default for foreign arrays (numba issue 7706),
so a step costs one kernel launch and no host round trip. ``threads_per_block`` is the CUDA
block size (``rllib-gpuenv bench block-size`` measures the best one for a GPU).

At small ``num_envs`` a step is host-bound: a step of 1,024 envs took 0.29 ms on the H100
lease's host (outputs reused, no checks) for microseconds of GPU work, and numba checks and
packs the kernel's ~20 arguments at every launch. Only the actions change from step to step, so
the first step also records its launch as a CUDA graph that reads the actions from a fixed
buffer (``LaunchGraph``); a later step is a copy into that buffer and a replay. The kernel itself
is compiled (or loaded from numba's on-disk cache) and loaded onto the GPU when the env is made
(``load``), as numba-cpu's is. Where
the caller records a CUDA graph of its own (a loop of steps, say), the step launches, and that
graph records the launch. What replaying saves is for a GPU to measure (``bench scaling`` times
both ways). The launch is recorded again when what the kernel reads moves (other buffers or
constants, another block size, actions of another shape or dtype), and where recording fails
the backend logs why and launches as before.

With ``NUMBA_ENABLE_CUDASIM=1`` numba simulates the GPU on the CPU: the same kernel then runs
on CPU tensors, which is how the tests check it on machines without a GPU (the simulator has no
graphs: there every step launches).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from numba import config as numba_config
from numba import cuda
from numba.core.errors import NumbaError

from rllib_gpuenv.backends.base import Backend
from rllib_gpuenv.backends.compile_log import log_first_call
from rllib_gpuenv.core.buffers import EnvBuffers, StepConstants, StepOutputs
from rllib_gpuenv.core.cuda_graphs import record_graph
from rllib_gpuenv.core.jit import bind, cuda_device_functions, use_numba
from rllib_gpuenv.core.step import BoundEnv, KernelArguments

logger = logging.getLogger(__name__)
use_numba()

SIMULATED = bool(numba_config.ENABLE_CUDASIM)
DEFAULT_THREADS_PER_BLOCK = 256
BEGIN_EPISODE = ADVANCE_ENV = None  # bound per env


def step_one_env(
    actions,
    state,
    array,
    steps,
    prev_done,
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
    i = cuda.grid(1)
    if i < state.shape[1]:
        if prev_done[i]:
            BEGIN_EPISODE(i, state, array, episode, seed32, lows, highs)
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


def kernel_source(env: BoundEnv, dtype: torch.dtype):
    """The Python function ``cuda.jit`` compiles for ``env`` and ``dtype`` (device functions
    bound), named as numba-cpu's kernel is: with a digest of the sources and parameters it is
    built from, which numba's on-disk cache tells kernels apart by (``BoundEnv.kernel_name``)."""
    begin_episode, advance_env = env.kernel_functions(dtype)
    name = env.kernel_name("step_one_env", dtype) or f"step_one_env__{env.definition.id.replace('-', '_')}"
    fn = bind(step_one_env, name=name, BEGIN_EPISODE=begin_episode, ADVANCE_ENV=advance_env)
    return cuda_device_functions(fn)


_KERNELS: dict = {}

RETURNED_ARRAY = "Only accept returning of array passed into the function as argument"


def explain_compile_error(err: Exception, env_id: str) -> Exception:
    """numba-cuda's error, or for an env function that returns a new array, one that says the fix."""
    if RETURNED_ARRAY not in str(err):
        return err
    return TypeError(
        f"numba-cuda cannot compile {env_id}: a function of the env returns an array that is not one of its "
        "arguments as it came (observe returning the state's array, a helper returning put's result), which a CUDA "
        "device function may not; mark it @jitable(returns_array=True), so that CUDA kernels inline it"
    )


def kernel_for(env: BoundEnv, dtype: torch.dtype):
    """The compiled step of ``env`` for state of ``dtype``: compiled once per process, and kept in
    numba's on-disk cache for later processes (one entry per GPU compute capability), as
    numba-cpu's is, where its sources can be read (an env defined in a notebook compiles in every
    process). On the H100 leases each process compiled it anew, 2.2 s of the build."""
    key = (env.definition, env.params, dtype)  # the definition itself: one registered again under its id is another
    if key not in _KERNELS:
        _KERNELS[key] = cuda.jit(cache=env.kernel_name("step_one_env", dtype) is not None)(kernel_source(env, dtype))
    return _KERNELS[key]


def cuda_available() -> bool:
    """numba can launch kernels here: a real GPU with a working driver, or the simulator."""
    try:
        return bool(cuda.is_available())
    except Exception:  # a broken driver install raises instead of answering False
        return False


def _as_kernel_array(tensor: torch.Tensor):
    """A zero-copy numba view of a torch tensor (a numpy view under the simulator)."""
    if SIMULATED:
        return tensor.numpy()
    return cuda.as_cuda_array(tensor.detach(), sync=False)


@dataclass
class LaunchGraph:
    """One recorded launch of the step kernel: replayed with the actions copied into ``actions``."""

    graph: torch.cuda.CUDAGraph
    actions: torch.Tensor  # the fixed buffer the recorded kernel reads its actions from
    buffers: EnvBuffers  # the env's buffers the recorded kernel reads and writes (kept alive here)
    key: tuple  # the rest of what the recording holds fixed (``NumbaCUDABackend._recorded``)

    def holds(self, buffers: EnvBuffers, key: tuple) -> bool:
        return self.buffers is buffers and self.key == key

    def replay(self, actions: torch.Tensor) -> None:
        self.actions.copy_(actions)
        self.graph.replay()


class NumbaCUDABackend(Backend):
    name = "numba-cuda"
    # Replay the step's launch from a CUDA graph (module doc); off: every step launches through numba
    # (``bench scaling`` times both). A backend whose recording fails turns it off for itself.
    replay_launches = not SIMULATED

    def __init__(
        self,
        env: BoundEnv,
        num_envs: int,
        device: torch.device,
        dtype: torch.dtype,
        threads_per_block: int = DEFAULT_THREADS_PER_BLOCK,
    ):
        if not cuda_available():
            raise RuntimeError(
                "backend 'numba-cuda' needs a CUDA GPU that numba can use, and none was found "
                f"(torch.cuda.is_available()={torch.cuda.is_available()}). Use backend='torch' "
                "or 'numba-cpu', or install the CUDA target with `pip install rllib_gpuenv[cuda]`"
            )
        if SIMULATED and device.type != "cpu":
            raise ValueError("under NUMBA_ENABLE_CUDASIM=1 the numba-cuda backend runs on device='cpu'")
        if not SIMULATED and device.type != "cuda":
            raise ValueError(
                f"backend 'numba-cuda' runs on a CUDA device, but device={device} was asked for: "
                "use device='cuda', or backend='numba-cpu' or 'torch' for the CPU"
            )
        if isinstance(threads_per_block, bool) or not isinstance(threads_per_block, int) or not 1 <= threads_per_block <= 1024:
            raise ValueError(f"threads_per_block must be an integer in 1..1024, got {threads_per_block!r}")
        super().__init__(env, num_envs, device, dtype)
        self.threads_per_block = threads_per_block
        self._kernel = kernel_for(env, dtype)
        self._arguments = KernelArguments(self._kernel.py_func)
        self._outputs = StepOutputs.allocate(env.definition.obs_shape, num_envs, dtype, device)
        self._prepared_for = None  # (buffers, constants) the prepared arguments hold
        self._launched = False
        self._first_actions: torch.Tensor | None = None  # the first launch's actions buffer, reused by the recording
        self.launch_graph: LaunchGraph | None = None

    def load(self, buffers: EnvBuffers, constants: StepConstants, actions: torch.Tensor) -> None:
        """Compile the kernel for the arguments a launch passes (the actions in a buffer such as
        a recorded launch reads) and load it onto the GPU: once per process and env, a few seconds
        that the env's build holds rather than its first step. The simulator compiles nothing."""
        if SIMULATED:
            return
        self._prepare(buffers, constants)
        args = self._arguments.fill(actions=_as_kernel_array(self._actions_buffer(actions)))
        try:
            signature = tuple(self._kernel.typeof_pyval(arg) for arg in args)  # as a launch types them
            what = f"numba-cuda step of {self.env.definition.id}"
            log_first_call(self._kernel, args, what, call=lambda: self._kernel.compile(signature))
        except NumbaError as err:  # the env's code does not compile: say so now, with the fix where known
            raise explain_compile_error(err, self.env.definition.id) from err
        except Exception as err:  # noqa: BLE001 - anything else: the first launch compiles, as it did before ``load``
            logger.warning(
                "numba-cuda: %s's kernel could not be compiled when the env was made (%s: %s); its first step compiles it",
                self.env.definition.id,
                type(err).__name__,
                err,
            )

    def _prepare(self, buffers: EnvBuffers, constants: StepConstants) -> None:
        """numba views of the buffers and outputs (slow to make: when they change, not per step)."""
        views = {
            name: _as_kernel_array(t) for name, t in (*self.kernel_tensors(buffers).items(), *self._outputs._asdict().items())
        }
        self._arguments.prepare(actions=None, **views, **constants._asdict())
        self._prepared_for = (buffers, constants)

    def step(self, buffers: EnvBuffers, actions: torch.Tensor, constants: StepConstants, fresh: bool) -> StepOutputs:
        if self._prepared_for is None or self._prepared_for[0] is not buffers or self._prepared_for[1] is not constants:
            self._prepare(buffers, constants)
        if not (self._launched or SIMULATED):
            self._first_launch(actions)
            if self.replay_launches:  # record now, while the first step waits anyway (a recording synchronizes)
                self._recorded(buffers, actions)
        elif self._replaying() and self._recorded(buffers, actions) is not None:
            self.launch_graph.replay(actions)
        else:
            self._launcher()(*self._arguments.fill(actions=_as_kernel_array(actions)))
        # Numba views of new tensors are slow to make, so fresh outputs are copies (on the GPU).
        return self._outputs.clone() if fresh else self._outputs

    def _replaying(self) -> bool:
        """Whether this step replays the recorded launch: not where the caller records a CUDA graph
        of its own (a loop of steps, say), which then records the launch itself."""
        return self.replay_launches and not torch.cuda.is_current_stream_capturing()

    def _launcher(self):
        """The kernel configured for this step: one thread per env, on torch's current stream."""
        blocks = (self.num_envs + self.threads_per_block - 1) // self.threads_per_block
        if SIMULATED:
            return self._kernel[blocks, self.threads_per_block]
        stream = cuda.external_stream(torch.cuda.current_stream(self.device).cuda_stream)
        return self._kernel[blocks, self.threads_per_block, stream]

    def _actions_buffer(self, actions: torch.Tensor) -> torch.Tensor:
        """The buffer a recorded launch reads the actions from: the first launch's where it fits
        them (contiguous, of their shape and dtype), else a new one."""
        fixed = self._first_actions
        if fixed is None or fixed.shape != actions.shape or fixed.dtype != actions.dtype:
            fixed = self._first_actions = torch.empty_like(actions, memory_format=torch.contiguous_format)
        return fixed

    def _first_launch(self, actions: torch.Tensor) -> None:
        """The first launch reads the actions from the buffer a recording will read, so that the
        recording finds the kernel compiled for those argument types and loaded (``load``:
        nothing may compile or load while a graph records)."""
        args = self._arguments.fill(actions=_as_kernel_array(self._actions_buffer(actions).copy_(actions)))
        try:
            self._launcher()(*args)  # compiles here only where ``load`` could not (it said why)
        except NumbaError as err:
            raise explain_compile_error(err, self.env.definition.id) from err
        self._launched = True

    def _recorded(self, buffers: EnvBuffers, actions: torch.Tensor) -> LaunchGraph | None:
        """The recorded launch for these buffers, constants, block size and actions (recorded
        where the one held is for others); None where recording fails."""
        key = (self._prepared_for[1], self.threads_per_block, actions.shape, actions.dtype)
        if self.launch_graph is None or not self.launch_graph.holds(buffers, key):
            self.launch_graph = self._record_launch(buffers, actions, key)
        return self.launch_graph

    def _record_launch(self, buffers: EnvBuffers, actions: torch.Tensor, key: tuple) -> LaunchGraph | None:
        """Record the step's launch as a CUDA graph (recording runs nothing); None where it fails."""
        fixed = self._actions_buffer(actions)
        args = self._arguments.fill(actions=_as_kernel_array(fixed))
        try:
            # on the recording's stream: torch's current one inside
            graph, _ = record_graph(lambda: self._launcher()(*args), self.device)
        except Exception as error:  # noqa: BLE001 - any failure to record means: launch every step
            self.replay_launches = False
            logger.warning(
                "numba-cuda: the step's launch could not be recorded as a CUDA graph (%s: %s); every step launches",
                type(error).__name__,
                error,
            )
            return None
        logger.debug("numba-cuda: the step's launch of %d envs is recorded as a CUDA graph", self.num_envs)
        return LaunchGraph(graph, fixed, buffers, key)
