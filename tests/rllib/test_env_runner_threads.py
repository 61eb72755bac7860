"""The device env runner's numba-cpu threads where the envs share the learner's process (issue 28, 6f)."""

from rllib_gpuenv.backends.numba_cpu import learner_process_threads
from rllib_gpuenv.experiments import cartpole_config
from rllib_gpuenv.rllib import DeviceEnvRunner


def _backend(config):
    runner = DeviceEnvRunner(config=config)
    try:
        return runner.env.unwrapped._backend
    finally:
        runner.stop()


def test_envs_beside_a_local_learner_get_a_fixed_share_of_threads_and_a_users_count_wins():
    config = cartpole_config(device="cpu", seed=0).env_runners(num_env_runners=0, num_envs_per_env_runner=16)
    assert config.num_learners == 0
    config.environment(env_config={"backend": "numba-cpu"})
    backend = _backend(config)
    # a fixed count (no tuner: the learner's threads, which it would fight, are not in its timings)
    assert backend._tuner is None and backend.num_threads == learner_process_threads(16) == 1
    config.environment(env_config={"backend": "numba-cpu", "num_threads": 2})
    backend = _backend(config)
    assert backend._tuner is None and backend.num_threads == 2
