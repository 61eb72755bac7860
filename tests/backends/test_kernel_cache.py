"""numba's on-disk cache knows a kernel by its name, which must change with anything the kernel is
built from: numba checks only the file its function is written in, while an env's step reads
helpers and constants of other modules, and values a factory closed over."""

import hashlib
import importlib
import sys
import textwrap

import torch

from rllib_gpuenv import make_vector_env
from rllib_gpuenv.core.jit import source_fingerprint

CONSTANTS = "BONUS = {bonus}\n"
HELPERS = textwrap.dedent("""
    from rllib_gpuenv import jitable


    @jitable
    def scaled(x):
        return x * {scale}
""")
ENV = textwrap.dedent("""
    from typing import NamedTuple

    from gymnasium import spaces

    import cache_test_constants
    from cache_test_helpers import scaled
    from rllib_gpuenv import EnvDef, jitable, register_env


    class Params(NamedTuple):
        dt: float = 0.1


    @jitable
    def step(state, action, p):
        (x,) = state
        return (x + p.dt,), scaled(cache_test_constants.BONUS), x > 100.0


    @jitable
    def observe(state, p):
        (x,) = state
        return (x,)


    def make_step(bonus):
        @jitable
        def step(state, action, p):
            (x,) = state
            return (x + p.dt,), bonus, x > 100.0

        return step


    register_env(
        EnvDef(
            id="CacheTest-v0", gymnasium_env=None, params=Params, state_names=("x",), obs_size=1,
            observation_bounds=lambda p: (-1e3, 1e3), action_space=lambda p: spaces.Discrete(2),
            reset_bounds=lambda options, p: ((0.0,), (0.0,)), step=step, observe=observe, max_episode_steps=10,
        )
    )
""")


def write(folder, bonus: float, scale: float) -> None:
    (folder / "cache_test_constants.py").write_text(CONSTANTS.format(bonus=bonus))
    (folder / "cache_test_helpers.py").write_text(HELPERS.format(scale=scale))
    (folder / "cache_test_env.py").write_text(ENV)
    importlib.invalidate_caches()
    for name in ("cache_test_constants", "cache_test_helpers", "cache_test_env"):  # as a new process imports them
        if name in sys.modules:
            importlib.reload(sys.modules[name])
        else:
            importlib.import_module(name)


def reward(backend: str) -> float:
    env = make_vector_env("CacheTest-v0", 2, backend=backend)
    env.reset(seed=0)
    return env.step(torch.zeros(2, dtype=torch.long))[1].tolist()


def test_a_constant_or_helper_edited_in_another_module_compiles_afresh(tmp_path, monkeypatch):
    """The env's own file unchanged, a constant and a helper it imports edited (and imported again,
    as by a later process): numba-cpu steps as torch does, not with a kernel of the old ones."""
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        for bonus, scale in [(1.0, 1.0), (2.0, 3.0)]:  # either left out of the kernel's name: 2.0 or 3.0, not 6.0
            write(tmp_path, bonus, scale)
            assert reward("numba-cpu") == reward("torch") == [bonus * scale] * 2
    finally:
        for name in ("cache_test_constants", "cache_test_helpers", "cache_test_env"):
            sys.modules.pop(name, None)


def test_a_factorys_closures_make_different_kernels():
    def make_step(bonus):
        def step(state, action, p):
            return state, bonus, False

        return step

    def fingerprint(step):
        digest = hashlib.sha256()
        assert source_fingerprint([step], digest)
        return digest.hexdigest()

    assert fingerprint(make_step(3.0)) == fingerprint(make_step(3.0))  # stable: a later process finds the cache
    assert fingerprint(make_step(3.0)) != fingerprint(make_step(4.0))
