"""A batch of actions checked against a vector env's action space before anything steps.

Every env that steps on a device takes its actions through ``ActionCheck``: the suite's envs
(``envs/vector_env.py``) and the JAX envs (``jax_envs/vector_env.py``). Their steps would take a
wrong batch silently (an index out of range reads another env's row; a float action is truncated
to an index) or fail deep inside (a shape mismatch in a compiled kernel); here it is named, with
the fix, and the env is left as it was.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.spaces import Box, Discrete, Space


class ActionCheck:
    """Checks ``num_envs`` actions of ``single_action_space`` (``Discrete`` or ``Box``) and hands
    them on as one tensor on ``device``: int64 of the space's own values for ``Discrete``,
    float32 of shape ``(num_envs, *shape)`` for ``Box``. Box actions out of bounds pass (the envs
    clip them, as gymnasium's do)."""

    def __init__(self, single_action_space: Space, num_envs: int, device: torch.device):
        if not isinstance(single_action_space, (Discrete, Box)):
            raise TypeError(f"the device envs take Discrete or Box actions, not {single_action_space}")
        self.space = single_action_space
        self.shape = (num_envs, *single_action_space.shape)
        self.device = device
        self.dtype = torch.int64 if isinstance(single_action_space, Discrete) else torch.float32

    def __call__(self, actions, check_values: bool = True) -> torch.Tensor:
        """The actions as a tensor; ``check_values`` checks their range (``Discrete``) or NaNs
        (``Box``) too, which on a GPU reads them back to the host (off for a policy's actions)."""
        tensor = self._tensor(actions)
        if tuple(tensor.shape) != self.shape:
            raise ValueError(f"actions must have shape {self.shape}, one {self.text()} per env, got {tuple(tensor.shape)}")
        if isinstance(self.space, Discrete):
            return self._discrete(tensor, check_values)
        return self._box(tensor, check_values)

    def text(self) -> str:
        """One action, in words (for the messages only)."""
        space = self.space
        if isinstance(space, Discrete):
            return f"Discrete({space.n}) action (an integer in [{space.start}, {space.start + space.n - 1}])"
        return f"Box action (float, shape {space.shape}, bounds {space.low.tolist()}..{space.high.tolist()})"

    def _tensor(self, actions) -> torch.Tensor:
        if isinstance(actions, torch.Tensor):
            if actions.device != self.device:
                raise ValueError(
                    f"actions are on {actions.device}, but this env runs on {self.device}: move them with "
                    "actions.to(env.device)"
                )
            return actions.detach()
        try:
            array = np.asarray(actions)
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"actions must be a torch tensor, numpy array or list of numbers; got {type(actions).__name__}"
            ) from err
        if array.dtype.kind not in "biuf":  # object, str, ... : nothing that is an action
            raise TypeError(
                "actions must be a torch tensor, numpy array or list of numbers; got "
                f"{type(actions).__name__} of {array.dtype}"
            )
        if array.dtype.kind == "u":  # torch has few unsigned kernels: signed, values checked later
            if array.size and array.max() > np.iinfo(np.int64).max:
                raise ValueError(f"actions must be in {self.text()}; got values such as {array.max()}")
            array = array.astype(np.int64)
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device, non_blocking=True)

    def _discrete(self, tensor: torch.Tensor, check_values: bool) -> torch.Tensor:
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            has_nan = bool(torch.isnan(tensor).any()) if tensor.dtype.is_floating_point else False
            raise TypeError(
                f"actions must be integers ({self.text()}), got dtype {tensor.dtype}"
                + (" containing NaN" if has_nan else "")
                + ": cast them with .long() / .astype(np.int64)"
            )
        tensor = tensor.to(self.dtype)
        if check_values:
            low, high = int(self.space.start), int(self.space.start) + int(self.space.n) - 1
            lo, hi = torch.aminmax(tensor)
            if int(lo) < low or int(hi) > high:
                bad = tensor[(tensor < low) | (tensor > high)][:5].tolist()
                raise ValueError(f"actions must be in [{low}, {high}] ({self.text()}); got values such as {bad}")
        return tensor.contiguous()

    def _box(self, tensor: torch.Tensor, check_values: bool) -> torch.Tensor:
        if not tensor.dtype.is_floating_point:
            raise TypeError(f"actions must be floats ({self.text()}), got dtype {tensor.dtype}: cast them with .float()")
        tensor = tensor.to(self.dtype)
        if check_values and bool(torch.isnan(tensor).any()):
            rows = torch.nonzero(torch.isnan(tensor).flatten(1).any(1)).flatten()[:5].tolist()
            raise ValueError(
                f"actions contain NaN (envs {rows}); the env clips actions to its bounds, but NaN has no place in them"
            )
        return tensor.contiguous()
