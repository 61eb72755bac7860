"""Going on from where training stopped: trials that start from a checkpoint (``restore``), and
a Tune experiment resumed where it was interrupted (``--resume``).

``restore: PATH`` in an experiment (``rllib train --restore PATH`` for all of them) is old
``rllib train``'s way to continue training: every trial builds its algorithm from the
experiment's config, then loads the checkpoint's state into it (modules, optimizers, counters,
metrics and, on the device path, the envs and random generators) before its first iteration.
It is RLlib's own recipe for continuing with Tune, an ``on_algorithm_init`` callback that calls
``restore_from_path``; the iteration and env-step counters and the training time go on from the
checkpoint's, so stop criteria count the whole run. Anything else in the config may differ (a
new learning rate, more envs or learners: the envs then start new episodes). The checkpoint is
checked before Ray starts: its files readable, its algorithm, env and model the experiment's.

``--resume`` is Tune's: the experiment's folder (``storage_path/name``) holds its state, and
``Tuner.restore`` goes on with the trials that had not finished, each from its latest checkpoint
(from the start if it had none), keeping the finished ones.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from rllib_gpuenv.experiments.envs import unqualified_env_id
from rllib_gpuenv.experiments.errors import key_error

logger = logging.getLogger(__name__)


def check_restore(path, config, where: str, base_dir: str = ".", key: str = "restore", stop: dict | None = None) -> str:
    """The checkpoint ``path`` (relative to ``base_dir``) as an absolute path, after checking that
    its files can be read and that it fits ``config`` (an AlgorithmConfig): the same algorithm,
    env and networks (``network_settings``: its weights fit no others), and that the experiment's
    ``stop`` leaves it iterations to train; else an ``ExperimentError`` naming ``key``."""
    from rllib_gpuenv.rllib.checkpointing import CheckpointError, check_checkpoint_files, saved_config, saved_iteration

    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise key_error(where, key, f"expected the path of an algorithm checkpoint, got {path!r}")
    path = os.path.abspath(os.path.join(base_dir, os.path.expanduser(os.fspath(path))))
    try:
        check_checkpoint_files(path)
        saved = saved_config(path)
    except CheckpointError as err:
        raise key_error(where, key, str(err)) from None
    algo, saved_algo = config.algo_class.__name__, saved.algo_class.__name__
    if saved_algo != algo:
        raise key_error(
            where,
            key,
            f"{path} is a checkpoint of {saved_algo}, but the experiment runs {algo}: set `run: {saved_algo}` or "
            f"restore a {algo} checkpoint",
        )
    if unqualified_env_id(saved.env) != unqualified_env_id(config.env):
        raise key_error(
            where,
            key,
            f"{path} was trained on {saved.env}, but the experiment runs {config.env}: its networks are sized for "
            f"its env's spaces: restore it into an experiment on {saved.env}",
        )
    if getattr(saved, "checkpoint_replay_buffer", False) and getattr(config, "checkpoint_replay_buffer", None) is not None:
        held, learners = max(1, saved.num_learners), max(1, config.num_learners)
        if held != learners:  # the trial would fail on it after Ray's start (device_replay.py)
            raise key_error(
                where,
                key,
                f"{path} holds {held} replay buffer shard(s), one per learner, but the experiment has "
                f"num_learners={config.num_learners}: restore it with num_learners={saved.num_learners}",
            )
    networks, saved_networks = network_settings(config), network_settings(saved)
    differ = [name for name in networks if saved_networks[name] != networks[name]]
    if differ:
        raise key_error(
            where,
            key,
            f"{path} holds networks built with {', '.join(f'{n}={saved_networks[n]!r}' for n in differ)}, but the "
            f"experiment builds {', '.join(f'{n}={networks[n]!r}' for n in differ)}: set them in its model_config as "
            "the checkpoint has them",
        )
    limit, done = (stop or {}).get("training_iteration"), saved_iteration(path)
    if isinstance(limit, (int, float)) and done is not None and done >= limit:
        # Tune checks the stop criteria after each result: the trial would train one iteration and stop
        raise key_error(
            where,
            key,
            f"{path} is at training_iteration {done}, and the experiment stops at training_iteration {limit}: a trial "
            f"started from it counts on from {done}, so it has nothing to train; raise the stop's training_iteration, "
            f"e.g. --stop '{{\"training_iteration\": {done + int(limit)}}}' for {int(limit)} more",
        )
    return path


def network_settings(config) -> dict:
    """The ``model_config`` settings that shape RLlib's default networks: ``DefaultModelConfig``'s
    fields, its defaults filled in (an unset ``fcnet_hiddens`` is [256, 256]). What an algorithm
    adds there besides (DQN's epsilon schedule) does not decide whether weights fit."""
    import dataclasses

    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    given = config.model_config
    given = dataclasses.asdict(given) if dataclasses.is_dataclass(given) else dict(given or {})
    return {name: given.get(name, default) for name, default in dataclasses.asdict(DefaultModelConfig()).items()}


def restore_on_init(*, algorithm, checkpoint: str, **kwargs) -> None:
    """``on_algorithm_init``: the freshly built algorithm takes the checkpoint's state."""
    algorithm.restore_from_path(checkpoint)
    logger.info("%s: started from %s (iteration %d)", type(algorithm).__name__, checkpoint, algorithm.iteration)


def restoring(config, checkpoint: str):
    """A copy of ``config`` whose algorithm loads ``checkpoint`` once built (after any
    ``on_algorithm_init`` callables the config already has)."""
    config = config.copy(copy_frozen=False)
    existing = config.callbacks_on_algorithm_init
    existing = [] if existing is None else list(existing) if isinstance(existing, (list, tuple)) else [existing]
    config.callbacks(on_algorithm_init=[*existing, functools.partial(restore_on_init, checkpoint=checkpoint)])
    return config


def experiment_folder(storage_path: str | None, name: str) -> str:
    """Where Tune keeps an experiment's state: ``storage_path/name`` (Tune's default storage
    path: ``~/ray_results``), a URI where the storage path is one (``s3://bucket/runs/name``)."""
    from ray.train.constants import DEFAULT_STORAGE_PATH

    if storage_path and "://" in storage_path:
        return f"{storage_path.rstrip('/')}/{name}"
    return str(Path(os.path.expanduser(storage_path or DEFAULT_STORAGE_PATH)) / name)
