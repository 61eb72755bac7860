"""The suite's ids are usable from gymnasium and by RLlib's stock env runner, in fresh processes,
and importing the package stays light (no Ray, no numba, nothing written)."""

import dataclasses
import json
import os

import gymnasium as gym
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics

from rllib_gpuenv import ENV_IDS, register_env
from rllib_gpuenv.envs import env_definition
from tests.helpers import CPU_BACKENDS, ROOT, run_python


def test_make_vec_builds_every_env_in_a_fresh_process():
    code = """
import json, gymnasium as gym
out = {}
for env_id in ENV_IDS_HERE:
    env = gym.make_vec("rllib_gpuenv:" + env_id, num_envs=3, vectorization_mode="vector_entry_point",
                       backend="torch", dtype="float64")
    obs, _ = env.reset(seed=0)
    env.step(env.action_space.sample())
    out[env_id] = [type(env.unwrapped).__name__, env.num_envs, type(obs).__name__, env.unwrapped.max_episode_steps]
print(json.dumps(out))
""".replace("ENV_IDS_HERE", repr(list(ENV_IDS)))
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["GPUCartPole-v1"] == ["CartPoleVectorEnv", 3, "ndarray", 500]
    assert result["GPUPendulum-v1"] == ["PendulumVectorEnv", 3, "ndarray", 200]
    assert set(result) == set(ENV_IDS)


def test_make_vec_honours_the_vectorization_mode_asked_for():
    """No mode: the batched env (numpy output). "sync"/"async": gymnasium's own vectorisation of
    gymnasium's single env with the same parameters, with gymnasium's wrappers and vector_kwargs
    (issue 28, 6c: the spec used to force its vector entry point whatever was asked)."""
    batched = gym.make_vec("GPUCartPole-v1", num_envs=4, backend="numba-cpu")
    assert type(batched).__name__ == "CartPoleVectorEnv" and batched.backend == "numba-cpu" and batched.output == "numpy"
    sync = gym.make_vec(
        "GPUCartPole-v1",
        num_envs=3,
        vectorization_mode="sync",
        wrappers=[RecordEpisodeStatistics],
        vector_kwargs={"copy": False},
        masspole=0.2,
    )
    assert isinstance(sync, SyncVectorEnv) and sync.num_envs == 3 and sync.copy is False
    assert isinstance(sync.envs[0], RecordEpisodeStatistics) and type(sync.envs[0].unwrapped).__name__ == "CartPoleEnv"
    assert sync.envs[0].unwrapped.masspole == 0.2
    sync.reset(seed=0)
    sync.step(sync.action_space.sample())
    asynchronous = gym.make_vec(
        "GPUPendulum-v1", num_envs=2, vectorization_mode="async", vector_kwargs={"shared_memory": False}
    )
    try:
        assert isinstance(asynchronous, AsyncVectorEnv) and asynchronous.shared_memory is False
        obs, _ = asynchronous.reset(seed=0)
        assert obs.shape == (2, 3)
    finally:
        asynchronous.close()
    single = gym.make("GPUPendulum-v1", g=9.81).unwrapped
    assert type(single).__name__ == "PendulumEnv" and single.g == 9.81


def test_single_env_modes_of_a_vector_only_env_or_with_vector_arguments_fail_in_one_line():
    definition = dataclasses.replace(env_definition("GPUCartPole-v1"), id="VectorOnlyCartPole-v0", gymnasium_env=None)
    register_env(definition)
    assert gym.make_vec("VectorOnlyCartPole-v0", num_envs=2).num_envs == 2
    for mode in ("sync", "async"):
        with pytest.raises(
            ValueError, match=r"^VectorOnlyCartPole-v0 is a vector env only .*gym\.make_vec\('VectorOnlyCartPole-v0'"
        ):
            gym.make_vec("VectorOnlyCartPole-v0", num_envs=2, vectorization_mode=mode)
    with pytest.raises(
        ValueError, match=r"^the argument\(s\) backend, device belong to this package's batched GPUCartPole-v1"
    ) as err:
        gym.make_vec("GPUCartPole-v1", num_envs=2, vectorization_mode="sync", backend="torch", device="cpu")
    assert "\n" not in str(err.value) and "gym_env_vectorize_mode='vector_entry_point'" in str(err.value)


def test_importing_the_package_imports_no_ray_or_numba_and_writes_nothing(tmp_path):
    """Nor does a torch env write a compile cache: numba's goes to a folder of this test's own
    (the package's __pycache__ is shared with the other test processes, which compile kernels).
    The default backend on the CPU is numba-cpu, chosen without importing numba's CUDA target
    (half a second in every env runner's process; the simulator is never chosen automatically)."""
    code = """
import json, os, sys
import rllib_gpuenv
env = rllib_gpuenv.make_vector_env("GPUMountainCar-v0", 2, backend="torch")
print(json.dumps(sorted(m for m in ("ray", "ray.tune", "numba") if m in sys.modules)))
print(json.dumps(os.listdir(os.environ["NUMBA_CACHE_DIR"])))
env = rllib_gpuenv.make_vector_env("GPUCartPole-v1", 2, device="cpu")
print(json.dumps([env.backend, "numba" in sys.modules, "numba.cuda" in sys.modules]))
"""
    cache = tmp_path / "numba_cache"
    cache.mkdir()
    env = {"PYTHONDONTWRITEBYTECODE": "1", "NUMBA_CACHE_DIR": str(cache), "NUMBA_ENABLE_CUDASIM": "1"}
    proc = run_python(code, env=env)
    assert proc.returncode == 0, proc.stderr
    imported, written, default_env = map(json.loads, proc.stdout.strip().splitlines()[-3:])
    assert imported == [] and written == []
    assert default_env == ["numba-cpu", True, False]


def test_an_env_defined_outside_any_module_compiles_without_a_disk_cache():
    """The README's Reach1D, defined by ``exec`` in a bare namespace (as some tools run code): its
    functions belong to no module, so numba-cpu's kernel cannot be cached on disk, and is
    compiled in memory instead of failing."""
    import re

    import torch

    from rllib_gpuenv import make_vector_env

    text = open(os.path.join(ROOT, "README.md")).read()
    source = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if 'id="Reach1D-v0"' in b)
    namespace: dict = {}
    exec(source.replace("Reach1D-v0", "Reach1DNoModule-v0"), namespace)  # noqa: S102 (the README's own code)
    assert namespace["step"].__module__ is None
    from rllib_gpuenv.registration import registering_module

    assert registering_module("Reach1DNoModule-v0") is None  # no other process can import it: it goes by its bare id
    assert registering_module("GPUCartPole-v1") == "rllib_gpuenv"
    env = make_vector_env("Reach1DNoModule-v0", 16, backend="numba-cpu")
    obs, _ = env.reset(seed=0)
    obs, reward, *_ = env.step(torch.ones(16, dtype=torch.int64))
    assert obs.shape == (16, 2) and torch.isfinite(reward).all()


def test_a_definition_given_again_replaces_the_one_before_and_other_ids_are_refused(caplog):
    """Running the README's Reach1D cell again with other physics (a notebook, a reloaded module)
    replaces it, kernels and gymnasium's time limit included, as gymnasium's ``register`` does; an id
    that gymnasium has for an env of its own, or one of this package's, is refused before anything
    is registered."""
    import re

    import torch

    from rllib_gpuenv import make_vector_env
    from rllib_gpuenv.envs.cartpole import CartPoleVectorEnv

    text = open(os.path.join(ROOT, "README.md")).read()
    source = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if 'id="Reach1D-v0"' in b)
    source = source.replace("Reach1D-v0", "Reach1DAgain-v0")
    slower = source.replace("dt: float = 0.1", "dt: float = 0.5").replace("max_episode_steps=100", "max_episode_steps=50")
    force = "force = (ops.to_float(action) - 1.0) * p.max_force"
    assert force in source
    broken = slower.replace(force, "force = p.max_force if action > 1 else -p.max_force")  # a Python if: refused
    harder = slower.replace(force, "force = (ops.to_float(action) - 1.0) * 2.0 * p.max_force")  # the same parameters
    velocities = []
    for cell in (source, slower, broken, harder):
        if cell is broken:
            with pytest.raises(TypeError, match="a Python if"):
                exec(cell, {})  # noqa: S102
            continue
        exec(cell, {})  # noqa: S102 (the README's own code)
        for backend in CPU_BACKENDS:
            env = make_vector_env("Reach1DAgain-v0", 4, backend=backend, dtype="float64")
            env.reset(seed=0)
            env.step(torch.full((4,), 2))  # full force from rest: the velocity is dt * max_force
            velocities.append(env.state[:, 1].tolist())
    assert velocities == [[0.1] * 4] * 2 + [[0.5] * 4] * 2 + [[1.0] * 4] * 2
    assert "env definition 'Reach1DAgain-v0': replaced by the one given now" in caplog.text
    assert gym.registry["Reach1DAgain-v0"].max_episode_steps == 50

    for taken, message in [
        ("CartPole-v1", "gymnasium already has an env 'CartPole-v1'"),
        ("GPUPendulum-v1", "is an env of this package"),
    ]:
        with pytest.raises(ValueError, match=message):
            register_env(dataclasses.replace(CartPoleVectorEnv.definition, id=taken))
    assert env_definition("CartPole-v1") is None and env_definition("GPUPendulum-v1").id == "GPUPendulum-v1"


def _reach1d_source() -> str:
    import re

    text = open(os.path.join(ROOT, "README.md")).read()
    return next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if 'id="Reach1D-v0"' in b)


@pytest.mark.parametrize(
    "mistake, old, new, message",
    [
        (
            "if",
            "    distance = abs(target - position)\n",
            "    distance = abs(target - position)\n    if distance > 1.0:\n        distance = distance * 1.0\n",
            r"Boolean value of Tensor .* ambiguous: a Python if, .* use ops.select\(condition, a, b\)",
        ),
        (
            "two",
            "return (position, velocity, target), ops.select(arrived, p.bonus, -distance), arrived",
            "return (position, velocity, target), arrived",
            r"not enough values to unpack .*: step\(state, action, p\) returns \(state, reward, terminated\)",
        ),
        (
            "math",
            "distance = abs(target - position)",
            "distance = math.fabs(target - position)",
            r"only one element tensors .*: math.\* \(or float\(\), int\(\)\) on the state: use ops' functions",
        ),
        (  # passed the check, ran on torch and numba-cpu, and failed only when compiled for a GPU (a bare KeyError)
            "numpy",
            "distance = abs(target - position)",
            "distance = np.abs(target - position)",
            r"step calls np.abs, which run on one backend only .*: use ops' functions",
        ),
        (  # the hint spoke only of what step returns
            "action_unpacked",
            "    force = (ops.to_float(action) - 1.0)",
            "    (action,) = action\n    force = (ops.to_float(action) - 1.0)",
            r"too many values to unpack .*: .*the action is one number per env for Discrete actions \(not a tuple",
        ),
        (  # was torch's "size of tensor a (3) must match the size of tensor b (2)", naming neither env nor initial
            "initial",
            "step=step,",
            "step=step, initial=jitable(lambda state, p: state[:2]),",
            r"initial returns a state of 2 values, the state has 3 \(position, velocity, target\)",
        ),
        ("jitable", "@jitable\ndef step", "def step", r"step must be marked @jitable"),
        (
            "helper",
            "    distance = abs(target - position)\n",
            "    distance = farther(abs(target - position))\n",
            r"step calls farther\(\), which is not marked @jitable: mark it @jitable",
        ),
        (
            "float_flag",
            "arrived = (distance < p.tolerance) & (abs(velocity) < p.tolerance)",
            "arrived = ops.select(distance < p.tolerance, 1.0, 0.0) | (abs(velocity) < p.tolerance)",
            r"terminated, and conditions combined with &, \| and ~, must be booleans",
        ),
        (
            "state",
            "return (position, velocity, target), ops.select(",
            "return (position, velocity, target, target), ops.select(",
            r"step returns a state of 4 values: step\(state, action, p\) returns",
        ),
        (
            "obs",
            "obs_size=2,",
            "obs_size=3,",
            r"observation_bounds gives 2 lows \(\(2,\)\), one per number of the observation: obs_size is 3",
        ),
        ("params", "params=Reach1DParams,", "params=dict,", r"params must be a NamedTuple class"),
        (
            "observe_count",
            "return target - position, velocity\n",
            "return target - position, velocity, target\n",
            r"observe returns 3 values, obs_size is 2: one value per number of the observation",
        ),
        (
            "observe_constant",
            "return target - position, velocity\n",
            "return target - position, 0.0\n",
            r"observe's value 1 is the single number 0.0: .* \(a constant c: x \* 0.0 \+ c",
        ),
        (
            "reward_tuple",
            "ops.select(arrived, p.bonus, -distance), arrived",
            "(-distance, -distance), arrived",
            r"step's reward is a tuple, not one number per env",
        ),
        (
            "names",
            'state_names=("position", "velocity", "target"),',
            'state_names=("position", "velocity"),',
            r"reset_bounds gives 3 lows and 3 highs, one per number of the state: state_names has 2 \(position, velocity\)",
        ),
    ],
)
def test_mistakes_in_writing_an_env_are_named_where_it_is_registered(mistake, old, new, message):
    """The README's Reach1D with one of the usual mistakes: register_env tries it on tensors of 2
    envs and names the mistake with the rule that fixes it (torch's words alone said neither)."""
    source = _reach1d_source()
    assert old in source
    helper = "def farther(x):  # a helper without @jitable\n    return x\n\n\n"
    broken = (
        "import math\nimport numpy as np\n"
        + helper
        + source.replace(old, new).replace("Reach1D-v0", f"Reach1DMistake{mistake}-v0")
    )
    with pytest.raises((TypeError, ValueError), match=message):
        exec(broken, {})  # noqa: S102 (the README's own code, changed)
    assert env_definition(f"Reach1DMistake{mistake}-v0") is None  # nothing registered


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_each_shipped_definition_passes_the_check_a_users_definition_gets(env_id):
    """The suite's definitions, registered as a user's would be (another id): the definition check
    (discrete and Box actions, an array, float32 and float64) refuses none of them."""
    from rllib_gpuenv import make_vector_env

    copy_id = f"Copy{env_id}"
    register_env(dataclasses.replace(env_definition(env_id), id=copy_id, gymnasium_env=None))
    env = make_vector_env(copy_id, 2, backend="torch")
    env.reset(seed=0)
    env.step(env.action_space.sample())


def test_make_vector_env_imports_the_module_an_id_names(tmp_path):
    """``make_vector_env("your_module:Env-v0")`` in a process that has not imported the module
    imports it (it registers its env), as gymnasium, RLlib and ``rllib train`` do with the id; a
    module that is not there is named."""
    (tmp_path / "reach_module.py").write_text(_reach1d_source().replace("Reach1D-v0", "ReachModule-v0"))
    code = (
        "from rllib_gpuenv import make_vector_env\n"
        "env = make_vector_env('reach_module:ReachModule-v0', 4, backend='torch')\n"
        "print(env.definition.id, env.num_envs)\n"
        "try:\n    make_vector_env('no_such_module:Nothing-v0', 4)\n"
        "except ValueError as err:\n    print(err)\n"
    )
    out = run_python(code, env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    made, missing = out.stdout.strip().splitlines()
    assert made == "ReachModule-v0 4"
    assert missing.startswith("'no_such_module:Nothing-v0': cannot import 'no_such_module' (No module named"), missing
