"""Checkpoints that resume exactly, and that say which file is damaged.

RLlib's checkpoints hold the module, the optimizer and the metrics. A run restored from one and
trained one more iteration still differs from the run that went on, because three things are
missing: the envs' state (where each episode is, its step count and return so far), the
random generators (action sampling, minibatch shuffling: torch's and numpy's global ones) and
the runner's window of recent episode returns. The device env runner saves its envs, its last
observations and its window (``DeviceEnvRunner.get_state``); ``ResumesExactly`` saves the
process's random generators with the algorithm, so that save → restore → one iteration equals
one more iteration of the uninterrupted run, bit for bit, on the same device, for the local env
runner and learner (``num_env_runners=0``, ``num_learners=0``: the main job's setup). Remote env
runners are restarted from synced weights, as in RLlib, not from their envs' state.

It saves the run's clocks too: the training time (``time_total_s``, which Tune restores from its
own records but ``Algorithm.from_checkpoint`` starts again at 0) and the time spent evaluating
(``evaluation_time_total_s``, summed by ``experiments.progress.EvaluationTime``), so that a
resumed run's times count from its start, as its iterations and env steps do.

The learners' schedules are set from the restored env-step count and the config the algorithm
was built with, not left as the checkpoint had them: RLlib restores each optimizer's learning rate
from the checkpoint and sets it from the config only after the next update, and starts PPO's
entropy-coefficient schedule at step 0. A run resumed with a new ``lr`` (Tune's
PopulationBasedTraining after it clones a trial, a fine-tuning run from a checkpoint) trained its
first iteration with the old one, and a resumed entropy schedule was one iteration off.

A truncated or otherwise unreadable checkpoint file is an error that names the file, before
anything else is restored.

A checkpoint of an env of the user's own (``my_env:MyEnv-v0``, its module beside the experiment
file) records the folder that module was imported from, and a Python experiment file's folder
(``CODE_FILE``), so that ``evaluate`` and ``--resume``, run from another folder, import what the
training imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import random
import site
import sys
from pathlib import Path

import numpy as np
import torch
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

RANDOM_GENERATORS = "random_generators"
CLOCKS = "clocks"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read."""


MARKER = "rllib_checkpoint.json"  # what RLlib writes at the top of an algorithm's checkpoint
CODE_FILE = "code_folders.json"  # beside the state: the folders the run imported the user's env module from
# Python experiment files' folders, in the environment of the Ray workers that train them (their runtime env)
CODE_FOLDERS_VARIABLE = "RLLIB_GPUENV_CODE_FOLDERS"


def checkpoints_below(path: Path, depth: int = 4) -> list[Path]:
    """Algorithm checkpoints in the folders below ``path``, newest first, ``depth`` levels deep
    at most (a results folder's run/checkpoint, a Tune trial's checkpoint_NNNNNN), not a whole
    disk's walk."""
    found = [p.parent for level in range(1, depth + 1) for p in path.glob("/".join(["*"] * level + [MARKER]))]
    return sorted(found, key=lambda checkpoint: (checkpoint / MARKER).stat().st_mtime, reverse=True)


def not_a_checkpoint(path: Path, what: str) -> str:
    """Why ``path`` is not a checkpoint, and where there are some below it."""
    found = checkpoints_below(path) if path.is_dir() else []
    hint = "; a Tune run keeps them in <trial>/checkpoint_NNNNNN"
    if found:
        hint = f"; checkpoints below it, newest first: {', '.join(map(str, found[:3]))}"
    return f"{path}: not an RLlib algorithm checkpoint ({what}){hint}"


def module_root(module: str) -> str | None:
    """The ``sys.path`` folder this process imports ``module`` from, where that is a folder of the
    user's own: None for an installed module (site-packages), this package, or one not found."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.has_location or not spec.origin or module.split(".")[0] == __name__.split(".")[0]:
        return None
    root = Path(spec.origin).resolve().parent
    for _ in range(module.count(".") + (Path(spec.origin).name == "__init__.py")):
        root = root.parent
    installed = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root in installed or {"site-packages", "dist-packages"} & set(root.parts):  # a venv's, the system's
        return None
    return str(root)


def record_code_folders(checkpoint, config, folders=()) -> None:
    """Write into ``checkpoint`` the folders its run imported user code from: ``folders`` (a
    Python experiment file's, whose other modules it may import: callbacks, networks) and the
    root of the module that a ``module:Env-v0`` env names. Relative folders are taken from the
    working folder (a job's working folder).
    A checkpoint that is not a local folder (saved through a cloud ``filesystem``) gets none."""
    if not os.path.isdir(checkpoint):
        return
    env = config.env if isinstance(config.env, str) else ""
    roots = [*folders, module_root(env.split(":", 1)[0]) if ":" in env else None]
    file = Path(checkpoint) / CODE_FILE
    known = json.loads(file.read_text()) if file.is_file() else []
    roots = list(dict.fromkeys([*known, *(str(Path(r).resolve()) for r in roots if r)]))
    if roots:
        file.write_text(json.dumps(roots, indent=2))


def use_code_folders(checkpoint) -> list[str]:
    """Put the folders a checkpoint's run imported user code from (``record_code_folders``) on
    ``sys.path`` and return them (for Ray workers' PYTHONPATH). They go last, where they shadow
    nothing installed. Folders that no longer exist are left out."""
    file = Path(checkpoint).expanduser() / CODE_FILE
    try:
        folders = [f for f in json.loads(file.read_text()) if os.path.isdir(f)]
    except (OSError, ValueError, TypeError):
        return []
    sys.path.extend(f for f in folders if f not in sys.path)
    return folders


def check_checkpoint_files(path) -> None:
    """Load every state file of a checkpoint once; raise ``CheckpointError`` naming the first
    that cannot be read (a truncated copy, a file of another format, a module it needs that
    cannot be imported). A folder that is not a checkpoint (no ``rllib_checkpoint.json`` or
    ``class_and_ctor_args.pkl`` at its top) is named as such first, before any file below it is
    unpickled. The run's code folders go on ``sys.path`` first (``use_code_folders``)."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise CheckpointError(f"{root}: no such checkpoint directory")
    if not (root / MARKER).is_file() and not (root / "class_and_ctor_args.pkl").is_file():
        raise CheckpointError(not_a_checkpoint(root, f"no {MARKER} or class_and_ctor_args.pkl"))
    use_code_folders(root)
    files = sorted(root.rglob("*.pkl")) + sorted(root.rglob("*.msgpack"))
    if not files:
        raise CheckpointError(f"{root}: holds no checkpoint state files (*.pkl, *.msgpack)")
    for file in files:
        try:
            if file.suffix == ".pkl":
                with open(file, "rb") as f:
                    pickle.load(f)
            else:
                import msgpack
                import msgpack_numpy

                with open(file, "rb") as f:
                    msgpack.load(f, object_hook=msgpack_numpy.decode, strict_map_key=False)
        except ModuleNotFoundError as err:
            raise CheckpointError(missing_module(file, err)) from None
        except Exception as err:  # noqa: BLE001 (whatever a damaged file raises: name the file)
            raise CheckpointError(f"{file}: cannot be read ({type(err).__name__}: {err}); the checkpoint is damaged") from None


def missing_module(file, err: ModuleNotFoundError) -> str:
    """A checkpoint file that names a module of the user's (an env class, callbacks) this process
    cannot import: not damaged, but in need of that module's folder."""
    return (
        f"{file}: needs the module {err.name!r}, which this process cannot import: run from the folder the training "
        f"ran from, or put that module's folder on PYTHONPATH"
    )


def saved_config(path):
    """The config a checkpoint's algorithm will be built from (RLlib's class-and-constructor
    file), read without building it: what a resume needs to know before it starts anything."""
    from ray.rllib.utils.checkpoints import Checkpointable

    file = Path(path).expanduser() / Checkpointable.CLASS_AND_CTOR_ARGS_FILE_NAME
    if not file.is_file():
        raise CheckpointError(f"{Path(path).expanduser()}: has no {file.name}: not a checkpoint of an RLlib algorithm")
    with open(file, "rb") as f:
        ctor = pickle.load(f)
    args, kwargs = ctor["ctor_args_and_kwargs"]
    config = args[0] if args else kwargs["config"]
    return ctor["class"].get_default_config().update_from_dict(config) if isinstance(config, dict) else config


def saved_iteration(path) -> int | None:
    """The training iteration an algorithm checkpoint was saved at (its algorithm's own state
    file), or None where it cannot be read."""
    from ray.rllib.algorithms.algorithm import Algorithm

    file = Path(path).expanduser() / f"{Algorithm.STATE_FILE_NAME}.pkl"
    try:
        with open(file, "rb") as f:
            iteration = pickle.load(f).get("training_iteration")
    except Exception:  # noqa: BLE001 (another format, a damaged file: the restore names what it finds)
        return None
    return iteration if isinstance(iteration, int) else None


def random_generator_states() -> dict:
    """This process's global random generators: torch (CPU and every GPU), numpy, Python."""
    return {
        "torch": torch.get_rng_state(),
        "torch_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_random_generator_states(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if (
        state.get("torch_cuda") is not None
        and torch.cuda.is_available()
        and len(state["torch_cuda"]) == torch.cuda.device_count()
    ):
        torch.cuda.set_rng_state_all(state["torch_cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def follow_schedules(learner, timestep: int) -> None:
    """Set ``learner``'s scheduled values (learning rates; PPO's entropy coefficient) to those its
    config gives at ``timestep``: where RLlib's update leaves them after the update at that step."""
    for optimizer, schedule in learner._optimizer_lr_schedules.items():
        learner._set_optimizer_lr(optimizer, lr=schedule.update(timestep=timestep))
    entropy = getattr(learner, "entropy_coeff_schedulers_per_module", None)
    if entropy is not None:
        for module_id in learner.module.keys():
            entropy[module_id].update(timestep=timestep)


class ResumesExactly:
    """Mixin for an ``Algorithm``: checkpoints carry the process's random generators, and
    restoring checks the files first (see the module doc)."""

    evaluation_time_total_s = 0.0  # seconds in ``evaluate()`` over the run and the runs it resumes

    def save_to_path(self, path=None, *args, **kwargs) -> str:
        path = super().save_to_path(path, *args, **kwargs)
        files = os.environ.get(CODE_FOLDERS_VARIABLE, "")  # a Tune trial of Python experiment files
        record_code_folders(path, self.config, [f for f in files.split(os.pathsep) if f])
        return path

    def get_state(self, *args, **kwargs) -> dict:
        state = super().get_state(*args, **kwargs)
        state[RANDOM_GENERATORS] = random_generator_states()
        state[CLOCKS] = {"time_total_s": self._time_total, "evaluation_time_total_s": self.evaluation_time_total_s}
        return state

    def set_state(self, state: dict) -> None:
        generators, clocks = state.get(RANDOM_GENERATORS), state.get(CLOCKS)
        super().set_state({k: v for k, v in state.items() if k not in (RANDOM_GENERATORS, CLOCKS)})
        if generators is not None:
            self._restored_generators = generators
        if clocks is not None:
            self._time_total = clocks["time_total_s"]
            self.evaluation_time_total_s = clocks["evaluation_time_total_s"]

    def restore_from_path(self, path, *args, **kwargs):
        check_checkpoint_files(path)
        self._restored_generators = None
        result = super().restore_from_path(path, *args, **kwargs)
        if self.learner_group is not None:
            steps = self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)
            self.learner_group.foreach_learner(follow_schedules, timestep=int(steps))
        if self._restored_generators is not None:  # last: restoring the components draws nothing after this
            set_random_generator_states(self._restored_generators)
        return result

    @classmethod
    def from_checkpoint(cls, path, *args, **kwargs):
        check_checkpoint_files(path)
        return super().from_checkpoint(path, *args, **kwargs)
