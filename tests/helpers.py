"""What several test files share: paths, subprocesses, the `rllib` command, host-read counting."""

import contextlib
import csv
import glob
import inspect
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

from rllib_gpuenv.experiments.checks import is_known_metric, known_metric_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")
OLD_EXPERIMENTS = os.path.join(ROOT, "tests", "old_experiments")
ERROR_LINE = re.compile(r"^rllib: error: .+: experiment '[^']+': [^:]+: .+$")

# Backends that run on this machine's CPU (numba-cuda runs here only under the simulator,
# in its own subprocess: see backends/test_numba_cuda_sim.py).
CPU_BACKENDS = ["torch", "numba-cpu"]


def no_module_for_the_harness_frames(also: tuple[str, ...] = ()) -> None:
    """Tell ``inspect`` once that the frames below this call whose files are no module's (the
    harness's: xdist's exec'd ``remote.py``, ``<string>``), and the files in ``also`` (those of
    frames still to come), have none.

    RLlib's ``ConnectorV2.__init__`` calls ``inspect.stack()`` for every connector it builds, and
    for each such frame ``inspect.getmodule`` scans all of ``sys.modules`` again (its cache holds
    only files it found): with the thousands of modules a test process holds, that was about 2 s
    per algorithm build, ~11 % of the suite's CPU time. ``getmodule`` answers None for these
    files either way; now it finds that answer in its cache."""
    frame, files = sys._getframe(1), {}
    while frame is not None:
        files[frame.f_code.co_filename] = frame.f_code
        frame = frame.f_back
    files.update((name, compile("", name, "exec")) for name in also)
    for filename, code in files.items():
        if filename not in inspect.modulesbyfile and inspect.getmodule(code, filename) is None:
            inspect.modulesbyfile[filename] = "<no module>"  # sys.modules.get() of it: None


# The README's own env, written as it teaches (``ops.clip``, ``ops.select``: read from the module,
# where the shipped envs import each function by name).
EXAMPLE_ENV_FILE = os.path.join(ROOT, "examples", "write_your_own_env.py")
EXAMPLE_ENV_ID = "Reach1D-v0"


def register_example_env() -> str:
    """Import ``examples/write_your_own_env.py`` (it registers its env) and return the env's id."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("write_your_own_env", EXAMPLE_ENV_FILE)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return EXAMPLE_ENV_ID


def tiny_main_job_file(folder, rollout_length: int = 4, iterations: int = 3) -> str:
    """A main-job experiment file at a tiny size: 16 envs x ``rollout_length`` steps an iteration
    (CartPole episodes last at least 8 steps: at 4, the first iteration ends none)."""
    path = os.path.join(str(folder), "tiny.yaml")
    with open(path, "w") as f:
        f.write(
            "tiny:\n  run: DevicePPO\n  env: GPUCartPole-v1\n"
            f"  stop: {{env_runners/episode_return_mean: 475, training_iteration: {iterations}}}\n"
            "  config: {seed: 0, num_envs_per_env_runner: 16, "
            f"device_rollouts: {{rollout_length: {rollout_length}}}, minibatch_size: 64, num_epochs: 1}}\n"
        )
    return path


def train_briefly(config, num_envs: int, rollout_length: int, iterations: int = 2):
    """``config`` at test sizes on the CPU (``num_envs`` × ``rollout_length`` steps an iteration,
    one epoch of two minibatches, seed 0), trained ``iterations`` times in this process (nothing
    remote, no Ray). Returns the last result's ``env_runners`` metrics and the env runner; the
    algorithm is stopped. Checks that every step sampled was counted."""
    config = (
        config.env_runners(num_envs_per_env_runner=num_envs)
        .device_rollouts(rollout_length=rollout_length)
        .devices(learner="cpu", env_runners="cpu")
        .training(minibatch_size=num_envs * rollout_length // 2, num_epochs=1)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        metrics = [algo.train() for _ in range(iterations)][-1]["env_runners"]
        assert metrics["num_env_steps_sampled_lifetime"] == iterations * num_envs * rollout_length
        return metrics, algo.env_runner
    finally:
        algo.stop()


def run_python(code: str, env: dict | None = None, timeout: int = 600, clean: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (for registration and simulator tests), with this
    process's environment and ``env`` (``clean``: with ``env`` alone)."""
    full_env = {**(env or {})} if clean else {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout)


# What every command imports (torch, Ray, RLlib, the package): the fork server loads it once. Also
# torch's compiler, which torch imports at a process's first optimizer (``Optimizer.add_param_group``
# and ``step`` are wrapped to keep it out): 2.7 CPU-s of every command that trains, on a 2-core CPU.
COMMAND_IMPORTS = ["rllib_gpuenv.cli", "rllib_gpuenv.cli.rllib", "rllib_gpuenv.rllib", "torch._dynamo"]
_fork_server = None


def _run_forked(kind: str, name: str, args: list[str], env: dict, out_path: str, err_path: str) -> None:
    """In the forked process: ``python -m name args`` (``kind`` "module"), ``python name args``
    ("path") or ``python -c name`` ("code") as the interpreter runs them (``__main__``,
    ``sys.argv``, the exit code, atexit handlers), stdout and stderr into files."""
    import atexit
    import runpy

    os.environ.clear()
    os.environ.update(env)
    # Ray's C++ settings were read from the fork server's environment when it loaded Ray; read
    # them from this one, as a new interpreter would. (A local ray.init() in the test process
    # sets RAY_AUTH_MODE=token there: without this, a forked ray.init() would start a GCS that
    # wants a token and a driver that sends none.)
    from ray._raylet import Config

    Config.initialize("")
    os.chdir(ROOT)
    for fd, path in ((1, out_path), (2, err_path)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.argv = ["-c" if kind == "code" else name, *args]
    no_module_for_the_harness_frames(also=("<frozen runpy>", "<string>"))  # runpy's frames, -c code
    try:
        if kind == "module":
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        elif kind == "path":
            sys.path.insert(0, os.path.dirname(name))
            runpy.run_path(name, run_name="__main__")
        else:
            exec(compile(name, "<string>", "exec"), {"__name__": "__main__"})
    finally:
        atexit._run_exitfuncs()  # Ray's shutdown among them, as at an interpreter's exit


@contextlib.contextmanager
def _started(kind: str, name: str, args: tuple[str, ...]):
    """The forked process, started (multiprocessing's ``Process``), and a function that joins it
    (with a timeout) and returns it as a ``CompletedProcess``; killed if the block leaves it running."""
    import multiprocessing
    import tempfile

    global _fork_server
    if _fork_server is None:
        _fork_server = multiprocessing.get_context("forkserver")
        _fork_server.set_forkserver_preload(COMMAND_IMPORTS)
    env = {**os.environ, "PYTHONPATH": ROOT}
    command = ["python", *{"module": ["-m"], "path": [], "code": ["-c"]}[kind], name, *args]
    with tempfile.TemporaryDirectory() as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        process = _fork_server.Process(target=_run_forked, args=(kind, name, list(args), env, out, err))
        process.start()

        def finished(timeout: float) -> subprocess.CompletedProcess:
            process.join(timeout)
            if process.exitcode is None:
                process.kill()
                process.join()
                raise subprocess.TimeoutExpired(command, timeout, open(out).read(), open(err).read())
            return subprocess.CompletedProcess(command, process.exitcode, open(out).read(), open(err).read())

        try:
            yield process, finished
        finally:
            if process.exitcode is None:
                process.kill()
                process.join()


def _forked(kind: str, name: str, args: tuple[str, ...], timeout: int) -> subprocess.CompletedProcess:
    with _started(kind, name, args) as (_, finished):
        return finished(timeout)


def started_module(module: str, *args: str):
    """``run_module``'s command, started: ``with started_module(...) as (process, finished)``, where
    ``process.pid`` can be signalled and ``finished(timeout)`` waits for the ``CompletedProcess``."""
    return _started("module", module, args)


def run_module(module: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m module args`` in a fresh process, forked from a server process of this test
    process's that has imported ``COMMAND_IMPORTS`` (multiprocessing's fork server): a command
    as a user runs it, without its 5-10 s of imports each time. Environment variables that take
    effect at import time (numba's, JAX's) need ``run_python`` or a real ``python -m``."""
    return _forked("module", module, args, timeout)


def run_script(path: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python path args``, forked as ``run_module`` forks a command."""
    return _forked("path", path, args, timeout)


def run_code(code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -c code``, forked as ``run_module`` forks a command: for code that needs a process
    of its own (a Ray instance of its own, a module taken away) but not a fresh interpreter."""
    return _forked("code", code, (), timeout)


def interrupted(
    module: str, args: list[str], ready, stop_signal: int = signal.SIGINT
) -> tuple[subprocess.CompletedProcess, str]:
    """``module``'s ``main(args)`` in a fresh interpreter (a command as a user runs it), sent
    ``stop_signal`` (default SIGINT: Ctrl-C) once ``ready(output so far)`` holds. Returns the
    finished process (its stdout what came after the signal) and the output read before it."""
    run = f"import sys\nfrom {module} import main\nsys.exit(main({list(args)!r}))"
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    job = subprocess.Popen(
        [sys.executable, "-c", run], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 600  # a hang guard only: the caller waits for a line, not for a time
        before = ""
        while not ready(before):
            assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()[-3000:]
            before += job.stdout.readline()
        job.send_signal(stop_signal)
        out, err = job.communicate(timeout=600)
    finally:
        job.kill()
    return subprocess.CompletedProcess(job.args, job.returncode, out, err), before


def rllib(*args, timeout=900) -> subprocess.CompletedProcess:
    """The installed-style command: python -m rllib_gpuenv.cli.rllib (what the `rllib` script runs)."""
    return run_module("rllib_gpuenv.cli.rllib", *args, timeout=timeout)


def write(tmp_path, text, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("rllib: error:")]


def trial_progress(experiment_dir) -> list[list[dict]]:
    """Each trial's progress.csv rows (one per reported iteration)."""
    return [list(csv.DictReader(open(p))) for p in sorted(glob.glob(os.path.join(experiment_dir, "*", "progress.csv")))]


def assert_every_reported_metric_is_a_known_stop_metric(experiment_dir, config):
    """What Tune recorded is what a stop criterion may name: the known-metric set covers it all."""
    names = known_metric_names(config)
    for rows in trial_progress(experiment_dir):
        unknown = [k for k in rows[0] if not k.startswith("config/") and not is_known_metric(k, names)]
        assert not unknown, unknown


class HostReads:
    """Counts, by name, the torch calls that on a CUDA tensor make the host wait for the GPU,
    also where tensors are on the CPU (so CI can check a GPU path for host syncs).

    Two kinds: ATen ops that read a value back (``item``/``bool``: ``_local_scalar_dense``; an
    output whose size depends on the data: ``nonzero``, ``masked_select``, indexing with a
    mask; ``multinomial`` and ``normal`` with tensor scales, which check their inputs on the
    host) and Python-level copies to the host (``tolist``, ``numpy``, ``cpu``).
    """

    OPS = {
        "aten._local_scalar_dense.default",
        "aten.nonzero.default",
        "aten.masked_select.default",
        "aten.equal.default",
        "aten.multinomial.default",
        "aten.normal.Tensor_Tensor",
        "aten.normal.Tensor_float",
        "aten.normal.float_Tensor",
        "aten.repeat_interleave.Tensor",
        "aten._unique2.default",
        "aten.unique_consecutive.default",
    }
    METHODS = {"tolist", "numpy", "cpu"}

    def __init__(self):
        import collections

        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        self.counts = collections.Counter()
        reads = self

        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = str(func)
                masked = name.startswith(("aten.index.", "aten.index_put")) and any(
                    getattr(i, "dtype", None) is not None and not i.dtype.is_floating_point and i.dtype.itemsize == 1
                    for i in (args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ())
                )  # a bool (or uint8) index: the output's size is the mask's count
                if name in reads.OPS or masked:
                    reads.counts[name] += 1
                return func(*args, **(kwargs or {}))

        class Methods(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name in reads.METHODS:
                    reads.counts[f"Tensor.{name}"] += 1
                return func(*args, **(kwargs or {}))

        self._modes = (Methods(), Ops())

    def __enter__(self) -> "HostReads":
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RAY_START_TIMED_OUT = "The current node timed out during startup"  # ray start, when its 30 s wait for the head ran out


class RayNodes:
    """Real Ray nodes on this machine: ``ray start --block`` processes (a head, then workers), each
    with its own CPUs and custom resources, token authentication as a cluster has it; stopped by
    pid (SIGTERM, which ``ray start --block`` passes on to the processes it started), never by
    ``ray stop``. ``env`` is what a driver needs to join (``RAY_ADDRESS`` and the token)."""

    HANG_GUARD_S = 600
    START_ATTEMPTS = 3

    def __init__(self, tmp_path, nodes: list[dict]):
        import secrets
        import tempfile

        self.nodes, self.processes, self.logs = nodes, [], []
        self.temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must stay short
        self.port = free_port()
        self.tmp_path = tmp_path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIRTUAL_ENV"))}
        self.env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN=secrets.token_hex(32),
            RAY_USAGE_STATS_ENABLED="0",
            AUTOSCALER_METRIC_PORT=str(free_port()),
            DASHBOARD_METRIC_PORT=str(free_port()),
            PYTHONPATH=ROOT,
        )
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self) -> "RayNodes":
        import json

        ray = os.path.join(os.path.dirname(sys.executable), "ray")
        try:
            for i, node in enumerate(self.nodes):
                if i == 0:
                    where = ["--head", f"--port={self.port}", f"--temp-dir={self.temp_dir}", "--include-dashboard=false"]
                    where.append(f"--ray-client-server-port={free_port()}")
                else:
                    where = [f"--address={self.address}"]
                command = [ray, "start", "--block", *where, f"--num-cpus={node['num_cpus']}"]
                command.append(f"--dashboard-agent-listen-port={free_port()}")
                if node.get("resources"):
                    command.append(f"--resources={json.dumps(node['resources'])}")
                self._start(i, command)
        except BaseException:
            self.__exit__()  # the nodes that did start: a failed start leaves nothing running
            raise
        return self

    def _start(self, i: int, command: list[str]) -> None:
        """Start node ``i`` and wait until it says it runs. Ray gives a node 30 s to register with
        the head (a fixed wait of its own); on a loaded machine that can run out, which says
        nothing of the test: then the node is started again."""
        import time

        log = self.tmp_path / f"node{i}.log"
        self.logs.append(log)
        for attempt in range(self.START_ATTEMPTS):
            with open(log, "w") as out:
                process = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
            self.processes.append(process)
            deadline = time.monotonic() + self.HANG_GUARD_S
            while "Ray runtime started" not in log.read_text() and process.poll() is None:  # readiness, waited for
                assert time.monotonic() < deadline, f"node {i} has not started after a long wait:\n{log.read_text()[-3000:]}"
                time.sleep(0.5)
            text = log.read_text()
            if "Ray runtime started" in text:
                return
            self.processes.remove(process)  # it has exited
            assert RAY_START_TIMED_OUT in text and attempt + 1 < self.START_ATTEMPTS, (
                f"node {i} did not start:\n{text[-3000:]}"
            )

    def __exit__(self, *exc) -> None:
        import shutil
        import signal

        for process in reversed(self.processes):
            process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def run_driver(self, code: str, timeout: int = HANG_GUARD_S) -> subprocess.CompletedProcess:
        """``code`` in a fresh interpreter joined to these nodes (``ray.init()`` finds them by ``RAY_ADDRESS``)."""
        env = {**self.env, "RAY_ADDRESS": self.address}
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
