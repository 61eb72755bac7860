"""Replay buffers that live on the learner's device: preallocated circular tensors.

``add`` writes a batch of transitions with one indexed copy per column, ``sample`` draws
minibatches with one random index tensor and one gather per column: nothing loops over
transitions in Python, and on a GPU nothing leaves it (no host sync either). Their capacity is
checked against the device's free memory before anything is allocated.

``DeviceReplayBuffer`` draws uniformly; ``PrioritizedDeviceReplayBuffer`` draws in proportion
to priorities, as RLlib's ``PrioritizedEpisodeReplayBuffer`` does, with a cumulative sum and a
binary search over a priority column instead of its segment trees in Python.
"""

from __future__ import annotations

import torch

from rllib_gpuenv.core.devices import check_fits

WEIGHTS = "weights"  # a draw's importance-sampling weights, RLlib's column name


class DeviceReplayBuffer:
    """Uniform replay of transitions ``(obs, action, n-step reward, next_obs, terminated, n)``.

    Args:
        capacity: transitions kept; the oldest are overwritten first.
        example: one transition's columns (shapes and dtypes, no batch dimension).
        device: where the buffer lives (the learner's device).
    """

    extra_bytes = 0  # per transition, beside the columns (a subclass's own)

    def __init__(self, capacity: int, example: dict[str, torch.Tensor], device: torch.device, seed: int | None = None):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"replay_buffer_config['capacity'] must be a positive integer, got {capacity!r}")
        per_transition = sum(t.element_size() * max(1, t.numel()) for t in example.values())
        check_fits(capacity, per_transition + self.extra_bytes, torch.device(device), "replay_buffer_config['capacity']")
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
        self._added_at(index)
        self.position = (self.position + k) % self.capacity
        self.size = min(self.capacity, self.size + k)

    def _added_at(self, index: torch.Tensor) -> None:
        """A subclass's hook: the rows ``index`` now hold new transitions."""

    def sample(self, num_items: int) -> dict[str, torch.Tensor]:
        """``num_items`` transitions drawn uniformly, with replacement, and their weights (all 1)."""
        self._check_not_empty()
        index = torch.randint(0, self.size, (num_items,), device=self.device, generator=self._generator)
        return {**self._gather(index), WEIGHTS: torch.ones(num_items, device=self.device)}

    def _check_not_empty(self) -> None:
        if self.size == 0:
            raise RuntimeError("the replay buffer is empty: add transitions before sampling")

    def _gather(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
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
            kept = self._kept_rows(state)
            self.added = state["added"]
            if kept is None:  # as saved
                self.size, self.position = state["size"], state["position"]
            else:
                self.size, self.position = len(kept), len(kept) % self.capacity
            for name, column in self.columns.items():
                saved = state["columns"][name]
                column[: self.size].copy_(saved if kept is None else saved[kept])
        else:  # counters only make sense with the transitions they count
            self.size = self.position = 0
            self.added = state["added"]

    def _kept_rows(self, state: dict) -> torch.Tensor | None:
        """None where the saved rows fit this buffer as they lie (its own capacity, or rows not yet
        wrapped around). A buffer of another capacity (a run restored with another
        ``replay_buffer_config['capacity']``) takes the saved rows oldest first, the newest that
        fit: their indices. The saved buffer's newest row is the one before its ``position``."""
        size, position = state["size"], state["position"]
        if size <= self.capacity and (position == size or size == self.capacity):
            return None
        return torch.roll(torch.arange(size), -position)[-self.capacity :]


class PrioritizedDeviceReplayBuffer(DeviceReplayBuffer):
    """Proportional prioritized replay (Schaul et al., 2016) with RLlib's arithmetic
    (``PrioritizedEpisodeReplayBuffer``): transition ``i`` is drawn with probability
    ``p_i ** alpha / sum_k p_k ** alpha``; a new one gets the highest priority seen so far; after
    an update the drawn ones' priorities become their absolute TD errors (``update_priorities``,
    at least 1e-12); a draw's importance-sampling weight is ``(N * P(i)) ** -beta`` divided by the
    largest any transition held could get, i.e. ``(p_min / p_i) ** (alpha * beta)``.

    A draw is one cumulative sum over the held priorities and a binary search per item: O(N) work
    per draw where a sum tree takes O(log N) per item, but a handful of device ops for a whole
    round's minibatches, with nothing read back to the host.
    """

    extra_bytes = 4  # the priority column

    def __init__(
        self,
        capacity: int,
        example: dict[str, torch.Tensor],
        device: torch.device,
        seed: int | None = None,
        *,
        alpha: float,
        beta: float,
    ):
        super().__init__(capacity, example, device, seed)
        self.alpha, self.beta = float(alpha), float(beta)
        self.priorities = torch.zeros(capacity, dtype=torch.float32, device=self.device)  # p ** alpha
        self.max_priority = torch.ones((), dtype=torch.float32, device=self.device)  # the highest p seen
        self._drawn: torch.Tensor | None = None  # the last draw's rows, for update_priorities

    def _added_at(self, index: torch.Tensor) -> None:
        self.priorities.index_put_((index,), self.max_priority**self.alpha)  # index_fill_ would read the value back

    def sample(self, num_items: int) -> dict[str, torch.Tensor]:
        """``num_items`` transitions drawn in proportion to their priorities, with replacement, and
        their importance-sampling weights."""
        self._check_not_empty()
        held = self.priorities[: self.size].double()
        cumulative = held.cumsum(0)
        u = torch.rand(num_items, dtype=torch.float64, device=self.device, generator=self._generator) * cumulative[-1]
        index = torch.searchsorted(cumulative, u, right=True).clamp_max_(self.size - 1)
        self._drawn = index
        weights = (held.min() / held[index]) ** self.beta
        return {**self._gather(index), WEIGHTS: weights.float()}

    def update_priorities(self, td_errors: torch.Tensor) -> None:
        """The last draw's transitions get ``td_errors`` (absolute TD errors, one per item drawn)
        as priorities (an item drawn twice: one of its two values)."""
        if self._drawn is None:
            raise RuntimeError("update_priorities sets the priorities of the last sample(): sample first")
        if td_errors.shape != self._drawn.shape:
            raise ValueError(f"{len(self._drawn)} items were drawn, but {tuple(td_errors.shape)} TD errors were given")
        priority = td_errors.detach().to(self.device, torch.float32).nan_to_num(nan=0.0).clamp_min(1e-12)
        self.priorities.index_copy_(0, self._drawn, priority**self.alpha)
        self.max_priority = torch.maximum(self.max_priority, priority.max())
        self._drawn = None

    def get_state(self, with_contents: bool = False) -> dict:
        state = super().get_state(with_contents)
        if with_contents:
            state["priorities"] = self.priorities[: self.size].cpu()
            state["max_priority"] = float(self.max_priority)
        return state

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self._drawn = None
        if "priorities" in state:
            kept = self._kept_rows(state)
            self.priorities[: self.size].copy_(state["priorities"] if kept is None else state["priorities"][kept])
            self.max_priority.fill_(state["max_priority"])
        elif "columns" in state:  # a uniform buffer's transitions: all as new ones
            self.priorities[: self.size].fill_(float(self.max_priority) ** self.alpha)
