"""A replay buffer that lives on the learner's device: preallocated circular tensors.

``add`` writes a batch of transitions with one indexed copy per column, ``sample`` draws
uniform minibatches with one random index tensor and one gather per column: nothing loops over
transitions in Python, and on a GPU nothing leaves it. Its capacity is checked against the
device's free memory before anything is allocated.
"""

from __future__ import annotations

import torch

from rllib_gpuenv.core.devices import check_fits


class DeviceReplayBuffer:
    """Uniform replay of transitions ``(obs, action, n-step reward, next_obs, terminated, n)``.

    Args:
        capacity: transitions kept; the oldest are overwritten first.
        example: one transition's columns (shapes and dtypes, no batch dimension).
        device: where the buffer lives (the learner's device).
    """

    def __init__(self, capacity: int, example: dict[str, torch.Tensor], device: torch.device, seed: int | None = None):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"replay_buffer_config['capacity'] must be a positive integer, got {capacity!r}")
        per_transition = sum(t.element_size() * max(1, t.numel()) for t in example.values())
        check_fits(capacity, per_transition, torch.device(device), "replay_buffer_config['capacity']")
        self.capacity = capacity
        self.device = torch.device(device)
        self.columns = {k: torch.empty((capacity, *t.shape), dtype=t.dtype, device=self.device) for k, t in example.items()}
        self.size = 0  # transitions held
        self.position = 0  # where the next one goes
        self.added = 0  # transitions added over the buffer's life
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(0 if seed is None else seed)

    def add(self, transitions: dict[str, torch.Tensor]) -> None:
        """Append a batch of transitions (dict of ``(k, ...)`` tensors), overwriting the oldest."""
        k = len(next(iter(transitions.values())))
        self.added += k
        if k > self.capacity:  # only the newest fit
            transitions = {name: t[-self.capacity :] for name, t in transitions.items()}
            k = self.capacity
        index = (torch.arange(k, device=self.device) + self.position) % self.capacity
        for name, column in self.columns.items():
            column.index_copy_(0, index, transitions[name].to(self.device, column.dtype))
        self.position = (self.position + k) % self.capacity
        self.size = min(self.capacity, self.size + k)

    def sample(self, num_items: int) -> dict[str, torch.Tensor]:
        """``num_items`` transitions drawn uniformly, with replacement."""
        if self.size == 0:
            raise RuntimeError("the replay buffer is empty: add transitions before sampling")
        index = torch.randint(0, self.size, (num_items,), device=self.device, generator=self._generator)
        return {name: column.index_select(0, index) for name, column in self.columns.items()}

    def get_state(self, with_contents: bool = False) -> dict:
        """Counters (and, if asked, the transitions and the sampler's state) for checkpoints."""
        state = {"size": self.size, "position": self.position, "added": self.added, "generator": self._generator.get_state()}
        if with_contents:
            state["columns"] = {k: v[: self.size].cpu() for k, v in self.columns.items()}
        return state

    def set_state(self, state: dict) -> None:
        self._generator.set_state(state["generator"])
        if "columns" in state:
            self.size, self.position, self.added = state["size"], state["position"], state["added"]
            for name, column in self.columns.items():
                column[: self.size].copy_(state["columns"][name])
        else:  # counters only make sense with the transitions they count
            self.size = self.position = 0
            self.added = state["added"]
