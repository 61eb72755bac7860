"""Env ids in experiment files: checked before Ray starts, and named so that any process builds them.

An experiment's ``env`` is a gymnasium id (the suite's ``GPUCartPole-v1``, yours as
``"your_module:Env-v0"``, gymnasium's own), one of gymnax's or Brax's JAX envs (``"gymnax:<id>"``, ``"brax:<name>"``) or a
``tune.register_env`` name. A wrong one is an
``ExperimentError`` with close matches now, not a failure inside a trial.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from typing import Any

from rllib_gpuenv.experiments.checks import one_line
from rllib_gpuenv.experiments.errors import key_error

PACKAGE = __name__.split(".")[0]


def _entry_point_module(entry_point: Any) -> str:
    if entry_point is None:
        return ""
    if callable(entry_point):
        return getattr(entry_point, "__module__", "") or ""
    return str(entry_point).split(":", 1)[0]


def is_package_env(env_id: str) -> bool:
    """Whether gymnasium's spec for ``env_id`` comes from this package (its entry points live here)."""
    import gymnasium as gym

    importlib.import_module(PACKAGE)  # registers our ids with gymnasium
    spec = gym.registry.get(env_id)
    if spec is None:
        return False
    modules = (_entry_point_module(spec.entry_point), _entry_point_module(spec.vector_entry_point))
    return any(m == PACKAGE or m.startswith(PACKAGE + ".") for m in modules)


def rllib_env_id(env: Any, where: str = "<command line>") -> Any:
    """``env`` as RLlib should get it, checked now rather than inside a trial.

    Ids registered through this package go module-qualified: the suite's as
    ``rllib_gpuenv:GPUCartPole-v1``, a user's as ``their_module:Env-v0`` (the module that defines
    it, ``registration.registering_module``). Tune's trial actors are fresh processes, and the
    prefix makes gymnasium import that module there before it looks the id up, without any Tune
    registration. Other ids pass unchanged.
    """
    if not isinstance(env, str):
        return env  # an env class or creator: Python users know what they pass
    module, _, name = env.rpartition(":")
    if module in ("", PACKAGE) and is_package_env(name):
        from rllib_gpuenv.registration import registering_module

        owner = registering_module(name)
        return f"{owner}:{name}" if owner else name  # None: only this process has it
    check_env(env, where)
    return env


def unqualified_env_id(env: Any) -> Any:
    """One of our ids without the module ``rllib_env_id`` puts before it
    (``rllib_gpuenv:GPUCartPole-v1`` -> ``GPUCartPole-v1``): a config written in Python may name
    the same env either way. Anything else as it is."""
    prefix = f"{PACKAGE}:"
    return env[len(prefix) :] if isinstance(env, str) and env.startswith(prefix) else env


def check_env(env: Any, where: str) -> None:
    """Fail now, not inside a trial, when ``env`` is neither a gymnasium id nor a Tune-registered env."""
    import gymnasium as gym

    if not isinstance(env, str):
        return
    from rllib_gpuenv.jax_envs import check_jax_id, is_jax_id

    if is_jax_id(env):  # JAX envs are no gymnasium ids: their library must have it (jax_envs/)
        try:
            check_jax_id(env)
        except (ValueError, ImportError) as err:
            raise key_error(where, "env", one_line(err)) from None
        return
    module, _, name = env.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            from rllib_gpuenv.registration import unimportable_prefix

            raise key_error(where, "env", unimportable_prefix(env, module, err)) from None
        except ImportError as err:  # the module is there but fails to import
            raise key_error(where, "env", f"{env!r}: cannot import {module!r} ({err})") from None
    else:
        importlib.import_module(PACKAGE)
    try:
        spec = gym.spec(name)
    except gym.error.DeprecatedEnv as err:
        raise key_error(where, "env", one_line(err)) from None
    except (gym.error.Error, ModuleNotFoundError, ImportError):
        spec = None
    if spec is not None:
        check_entry_points(spec, env, where)
        return
    if not module:
        from ray.tune.registry import ENV_CREATOR, _global_registry

        if _global_registry.contains(ENV_CREATOR, env):
            return
    moved = moved_env_class(env) if not module else None
    if moved:
        raise key_error(
            where,
            "env",
            f"unknown env {env!r}: RLlib moved that class to {moved}; RLlib's new API stack builds envs from gymnasium "
            f"ids or ray.tune.register_env names, so pass the class from a Python experiment file "
            f"(config.environment({moved.rsplit('.', 1)[-1]}))",
        )
    close = difflib.get_close_matches(name, list(gym.registry), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; register it with gymnasium or ray.tune.register_env"
    raise key_error(where, "env", f"unknown env {env!r}{hint}")


def check_entry_points(spec: Any, env: str, where: str) -> None:
    """Import the code of a registered gymnasium id, so that an env whose extra is missing
    (``LunarLander-v3`` without Box2D) is one line now, not a traceback from a trial."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    for entry_point in (spec.entry_point, spec.vector_entry_point):
        if isinstance(entry_point, str):
            try:
                load_env_creator(entry_point)
            except gym.error.DependencyNotInstalled as err:
                raise key_error(where, "env", f"{env!r}: {one_line(err)}") from None
            except (ImportError, AttributeError) as err:
                raise key_error(
                    where, "env", f"{env!r}: cannot load its entry point {entry_point!r} ({one_line(err)})"
                ) from None


OLD_EXAMPLE_ENVS = "ray.rllib.examples.env."  # RLlib's example env classes before Ray 2.10
EXAMPLE_ENVS = "ray.rllib.examples.envs.classes."  # ... and in RLlib 2.60


def moved_env_class(path: str) -> str | None:
    """Where RLlib 2.60 keeps an example env class that an old file names by its old class path
    (``ray.rllib.examples.env.repeat_after_me_env.RepeatAfterMeEnv``), if it still has it."""
    if not path.startswith(OLD_EXAMPLE_ENVS) or "." not in path[len(OLD_EXAMPLE_ENVS) :]:
        return None
    module, _, name = path.rpartition(".")
    candidates = [EXAMPLE_ENVS + module[len(OLD_EXAMPLE_ENVS) :]]
    try:  # moved to another module of the same folder: find the class by name
        import ray.rllib.examples.envs.classes as classes

        folder = os.path.dirname(classes.__file__)
        for root, _, files in os.walk(folder):
            for file in sorted(files):
                if file.endswith(".py"):
                    with open(os.path.join(root, file), encoding="utf-8") as f:
                        if re.search(rf"^class {re.escape(name)}\b", f.read(), re.M):
                            relative = os.path.relpath(os.path.join(root, file[:-3]), folder).replace(os.sep, ".")
                            candidates.append(EXAMPLE_ENVS + relative)
    except ImportError:
        return None
    for candidate in candidates:
        try:
            if hasattr(importlib.import_module(candidate), name):
                return f"{candidate}.{name}"
        except ImportError:
            continue
    return None


def vectorize_our_env(config: Any, settings: dict | None = None) -> None:
    """RLlib's stock env runner builds our ids as the vector envs they are (gymnasium's
    ``vector_entry_point``), not as N copies of a single env, unless the experiment chose a mode
    (``gym_env_vectorize_mode`` among its ``settings``, or, for a Python file's config, a mode
    other than RLlib's default): ``sync``/``async`` asked for are honoured."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    stock = config.env_runner_cls in (None, SingleAgentEnvRunner)
    ours = isinstance(config.env, str) and config.env.startswith(PACKAGE + ":")
    asked = "gym_env_vectorize_mode" in (settings or {})
    if stock and ours and not asked and config.gym_env_vectorize_mode == type(config)().gym_env_vectorize_mode:
        config.env_runners(gym_env_vectorize_mode="vector_entry_point")


def check_env_runner(config: Any, where: str) -> None:
    """JAX envs (``"gymnax:<id>"``, ``"brax:<name>"``) run on the device env runner only: RLlib's
    own runner would hand the id to gymnasium, which has no such env."""
    from rllib_gpuenv.rllib.env_runner import DeviceEnvRunner

    runner = config.env_runner_cls
    device = isinstance(runner, type) and issubclass(runner, DeviceEnvRunner)
    from rllib_gpuenv.jax_envs import is_jax_id

    if is_jax_id(config.env) and not device:
        raise key_error(
            where,
            "env",
            f"{config.env!r} is one of gymnax's or Brax's JAX envs, which run on the device env runner only: use DevicePPO, "
            "DeviceDQN or DeviceSAC (run: DevicePPO)",
        )
