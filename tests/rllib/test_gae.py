"""Device GAE against a straightforward per-env reference loop, on random inputs."""

import numpy as np
import torch

from rllib_gpuenv.rllib.gae import compute_gae


def reference_gae(rewards, values, terminated, truncated, gamma, lam):
    """Textbook GAE, one env and one step at a time (terminations: no bootstrap; truncations:
    bootstrap from the next observation's value; nothing flows back across a done step)."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            next_value = 0.0 if terminated[t, n] else values[t + 1, n]
            delta = rewards[t, n] + gamma * next_value - values[t, n]
            if terminated[t, n] or truncated[t, n]:
                running = 0.0
            running = delta + gamma * lam * running
            adv[t, n] = running
    return adv, adv + values[:-1]


def test_gae_matches_reference_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    T, N = 40, 16
    rewards = rng.normal(size=(T, N))
    values = rng.normal(size=(T + 1, N))
    terminated = rng.random((T, N)) < 0.08
    truncated = (rng.random((T, N)) < 0.08) & ~terminated
    assert terminated.any() and truncated.any()
    adv, targets = compute_gae(*(torch.as_tensor(x) for x in (rewards, values, terminated, truncated)), 0.97, 0.9)
    ref_adv, ref_targets = reference_gae(rewards, values, terminated, truncated, 0.97, 0.9)
    np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(targets.numpy(), ref_targets, rtol=1e-10, atol=1e-10)


def test_truncation_bootstraps_and_termination_does_not():
    rewards = torch.ones(1, 2)
    values = torch.tensor([[0.0, 0.0], [10.0, 10.0]])
    adv, _ = compute_gae(rewards, values, torch.tensor([[True, False]]), torch.tensor([[False, True]]), 0.9, 0.95)
    assert adv.tolist() == [[1.0, 10.0]]
