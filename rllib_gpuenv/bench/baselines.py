"""Environments we compare against, built the way their users build them."""

from __future__ import annotations

import math

import torch


class PlainTorchCartPole:
    """CartPole batched with plain torch ops, as in the CS267 paper's "PyTorch batching":
    the straightforward port a user writes first (torch's own RNG for resets, same-step
    resets, no seeding scheme, no input checks). The yardstick for our backends."""

    def __init__(self, num_envs: int, device: str | torch.device = "cpu"):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.state = torch.empty(num_envs, 4, device=self.device).uniform_(-0.05, 0.05)
        self.steps = torch.zeros(num_envs, dtype=torch.int32, device=self.device)

    def step(self, actions: torch.Tensor):
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force = (actions.float() * 2 - 1) * 10.0
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sintheta) / 1.1
        thetaacc = (9.8 * sintheta - costheta * temp) / (0.5 * (4.0 / 3.0 - 0.1 * costheta**2 / 1.1))
        xacc = temp - 0.05 * thetaacc * costheta / 1.1
        state = torch.stack((x + 0.02 * x_dot, x_dot + 0.02 * xacc, theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc), 1)
        self.steps += 1
        terminated = (state[:, 0].abs() > 2.4) | (state[:, 2].abs() > 12 * 2 * math.pi / 360)
        truncated = self.steps >= 500
        done = terminated | truncated
        fresh = torch.empty_like(state).uniform_(-0.05, 0.05)
        self.state = torch.where(done[:, None], fresh, state)
        self.steps = torch.where(done, 0, self.steps)
        return self.state, torch.ones(self.num_envs, device=self.device), terminated, truncated, {}
