"""Drawing actions on a GPU without waiting for it.

torch's samplers check their inputs on the host. ``torch.multinomial`` reads two scalars back
from the GPU on each call (are the probabilities finite and non-negative, does a row sum to
zero). RLlib's ``TorchCategorical.sample`` and DQN's epsilon-greedy both go through it.
``torch.normal`` with a tensor of scales reads one (are they all >= 0), and RLlib's
``TorchDiagGaussian.sample`` goes through that. Each read makes the host wait until the GPU has
run everything queued before it. In a rollout that happens every step, so the host can never
queue step t+1 while the GPU still runs step t. The draws here come from the same
distributions, with only ops that queue work and read nothing back:

- a categorical sample is the Gumbel-max: ``argmax(logits + G)`` with ``G = -log(E)``,
  ``E ~ Exp(1)``. torch's multinomial draws one sample as ``argmax(p / E)`` from the same
  exponentials, so this picks the very actions RLlib's draw picks, without the checks;
- a Gaussian sample is ``loc + scale * eps`` with ``eps ~ N(0, 1)``, which is ``rsample`` (SAC's
  tanh-squashed Gaussian squashes it after);
- a uniform choice among allowed actions is the Gumbel-max over the log of the mask.

``draw`` also skips, for a categorical, the distribution objects RLlib and torch build around
the logits (torch's checks its arguments): on a CPU they cost about as much as the small
network that computes the logits, every step of a rollout.
"""

from __future__ import annotations

import torch
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchCategorical,
    TorchDiagGaussian,
    TorchSquashedGaussian,
)


def categorical(logits: torch.Tensor) -> torch.Tensor:
    """One sample of ``Categorical(logits=logits)`` per row (int64), by the Gumbel-max trick."""
    exponential = torch.empty_like(logits).exponential_()
    return (logits - exponential.log()).argmax(dim=-1)


def uniform_among(allowed: torch.Tensor) -> torch.Tensor:
    """One action per row, uniform among the row's ``True`` entries (index 0 where none is)."""
    exponential = torch.empty(allowed.shape, device=allowed.device).exponential_()
    return torch.where(allowed, -exponential.log(), -torch.inf).argmax(dim=-1)


def sample(dist) -> torch.Tensor:
    """A sample of an RLlib action distribution, without a host read where one can be avoided
    (categorical and diagonal Gaussian; any other distribution samples as RLlib does)."""
    if type(dist) is TorchCategorical:
        logits = dist.logits if dist.logits is not None else dist.probs.log()
        return categorical(logits)
    if type(dist) in (TorchDiagGaussian, TorchSquashedGaussian):
        return dist.rsample()
    return dist.sample()


def draw(dist_cls, dist_inputs: torch.Tensor, explore: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Actions from a module's action-distribution inputs, and their log-probabilities when
    exploring (else None): a sample, or the distribution's deterministic action. A categorical's
    are computed from the logits directly (``categorical``, argmax, ``log_softmax``), any other
    distribution's through RLlib's class."""
    if dist_cls is TorchCategorical:
        if not explore:
            return dist_inputs.argmax(dim=-1), None
        actions = categorical(dist_inputs)
        return actions, torch.log_softmax(dist_inputs, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    dist = dist_cls.from_logits(dist_inputs)
    if dist_cls is TorchSquashedGaussian:  # SAC's: its deterministic action is the squashed mean, not the raw mean
        return dist.rsample_and_logp() if explore else (squashed_mean(dist), None)
    if not explore:
        dist = dist.to_deterministic()
    actions = sample(dist)
    return actions, dist.logp(actions) if explore else None


class _ReparameterizedNormal(torch.distributions.Normal):
    """torch's Normal whose ``sample`` is ``rsample`` without the gradient: the same numbers
    (``torch.normal`` also draws ``eps`` and returns ``loc + scale * eps``) without its host
    check of the scales."""

    def sample(self, sample_shape=()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)


class SquashedGaussian(TorchSquashedGaussian):
    """RLlib's tanh-squashed Gaussian, whose ``sample`` and ``sample_and_logp`` read nothing
    back. RLlib's SAC module draws the next state's actions with ``sample_and_logp`` in every
    gradient step; through ``torch.normal`` that waits for the GPU, and a gradient step that
    waits cannot be captured as a CUDA graph (on the H100 of 2026-11-27 DeviceSAC's capture
    failed so)."""

    def _get_torch_distribution(self, loc, scale) -> torch.distributions.Distribution:
        return _ReparameterizedNormal(loc, scale, validate_args=False)


def squashed_mean(dist: TorchSquashedGaussian) -> torch.Tensor:
    """The deterministic action of a tanh-squashed Gaussian: its mean squashed into the bounds.
    RLlib's ``to_deterministic`` returns the mean before the squash, which can lie outside them."""
    return dist.low + (torch.tanh(dist.loc) + 1.0) / 2.0 * (dist.high - dist.low)
