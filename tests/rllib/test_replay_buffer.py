"""The device replay buffers without Ray: prioritized draws follow RLlib's arithmetic
(``PrioritizedEpisodeReplayBuffer``: probabilities ``p ** alpha / sum``, weights
``(N * P(i)) ** -beta`` over the largest), new transitions come in at the highest priority seen,
and a buffer's state restores its draws."""

import numpy as np
import pytest
import torch

from rllib_gpuenv.rllib.replay_buffer import WEIGHTS, DeviceReplayBuffer, PrioritizedDeviceReplayBuffer

CPU = torch.device("cpu")


def prioritized(capacity=8, alpha=0.6, beta=0.4, seed=0) -> PrioritizedDeviceReplayBuffer:
    return PrioritizedDeviceReplayBuffer(capacity, {"x": torch.zeros(())}, CPU, seed, alpha=alpha, beta=beta)


def set_errors(buffer: PrioritizedDeviceReplayBuffer, td_by_x: torch.Tensor) -> None:
    """A draw large enough to reach every row, given the TD error its ``x`` names (as a learner
    gives each drawn transition its own)."""
    drawn = buffer.sample(64)["x"].long()
    assert set(drawn.tolist()) == set(range(len(td_by_x)))
    buffer.update_priorities(td_by_x[drawn])


def test_draws_follow_the_priorities_and_weights_are_rllibs():
    alpha, beta = 0.7, 0.5
    buffer = prioritized(alpha=alpha, beta=beta)
    buffer.add({"x": torch.arange(5.0)})  # rows 0-4 hold x = 0-4
    assert torch.equal(buffer.priorities[:5], torch.ones(5))  # the highest priority seen: 1 at first
    assert torch.equal(buffer.sample(5)[WEIGHTS], torch.ones(5))  # equal priorities: no correction
    td = torch.tensor([0.5, 2.0, 0.0, 4.0, 1.0])
    set_errors(buffer, td)
    p = td.clamp_min(1e-12).double() ** alpha
    assert torch.allclose(buffer.priorities[:5].double(), p)
    assert float(buffer.max_priority) == 4.0

    draws = buffer.sample(200_000)
    frequency = np.bincount(draws["x"].long().numpy(), minlength=5) / 200_000
    np.testing.assert_allclose(frequency, (p / p.sum()).numpy(), atol=0.004)
    # RLlib's weight: (N P(i)) ** -beta, divided by the largest any held transition gets
    probability = p / p.sum()
    rllib = (5 * probability) ** -beta / (5 * probability.min()) ** -beta
    torch.testing.assert_close(draws[WEIGHTS].double(), rllib[draws["x"].long()], rtol=1e-5, atol=0)


def test_new_transitions_come_in_at_the_highest_priority_and_overwrite_the_oldest():
    buffer = prioritized(capacity=4, alpha=1.0)
    buffer.add({"x": torch.arange(3.0)})
    set_errors(buffer, torch.tensor([3.0, float("nan"), 0.25]))  # a NaN error: the least priority
    assert torch.equal(buffer.priorities[:3], torch.tensor([3.0, 1e-12, 0.25]))
    buffer.add({"x": torch.tensor([10.0, 11.0])})  # row 3, then row 0 again (the oldest)
    assert buffer.columns["x"].tolist() == [11.0, 1.0, 2.0, 10.0]
    assert buffer.priorities.tolist()[0] == buffer.priorities.tolist()[3] == 3.0


def test_priorities_are_set_for_the_last_draw_only():
    buffer = prioritized()
    buffer.add({"x": torch.arange(4.0)})
    with pytest.raises(RuntimeError, match=r"sets the priorities of the last sample\(\): sample first"):
        buffer.update_priorities(torch.ones(4))
    buffer.sample(6)
    with pytest.raises(ValueError, match=r"6 items were drawn, but \(4,\) TD errors were given"):
        buffer.update_priorities(torch.ones(4))


def test_a_restored_buffer_draws_as_the_saved_one_would_have():
    buffer = prioritized(alpha=1.0, seed=3)
    buffer.add({"x": torch.arange(6.0)})
    set_errors(buffer, torch.linspace(0.1, 5.0, 6))
    state = buffer.get_state(with_contents=True)
    restored = prioritized(alpha=1.0, seed=99)
    restored.set_state(state)
    assert torch.equal(restored.priorities, buffer.priorities) and float(restored.max_priority) == 5.0
    expected = buffer.sample(32)
    for name, column in restored.sample(32).items():
        assert torch.equal(column, expected[name]), name
    counters_only = prioritized(alpha=1.0)
    counters_only.set_state(buffer.get_state())  # without the transitions it starts empty, as a new buffer does
    assert counters_only.size == 0


@pytest.mark.parametrize("capacity", [3, 6, 8], ids=["smaller", "wrapped-same", "larger"])
def test_a_buffer_of_another_capacity_restores_the_newest_transitions_oldest_first(capacity):
    """A run restored with another replay capacity: the saved buffer had wrapped (its newest rows
    before its position), so the new one takes the saved transitions in order of age, the newest
    that fit, and goes on after them; priorities with their transitions. (It was a shape error
    for a smaller one, and for a larger one rows never written counted as held and were drawn.)"""
    saved = prioritized(capacity=6, alpha=1.0)
    saved.add({"x": torch.arange(4.0)})
    saved.add({"x": torch.arange(4.0, 10.0)})  # 10 into 6 rows: 6 7 8 9 4 5, the next goes to row 4
    assert saved.columns["x"].tolist() == [6.0, 7.0, 8.0, 9.0, 4.0, 5.0] and saved.position == 4
    saved.update_priorities(saved.sample(64)["x"] + 1.0)  # each drawn row's priority: its x + 1 (seeded: all drawn)
    restored = prioritized(capacity=capacity, alpha=1.0)
    restored.set_state(saved.get_state(with_contents=True))
    held = restored.columns["x"][: restored.size].tolist()
    expected = {3: [7.0, 8.0, 9.0], 6: [6.0, 7.0, 8.0, 9.0, 4.0, 5.0], 8: [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]}[capacity]
    assert held == expected
    assert restored.priorities[: restored.size].tolist() == [x + 1.0 for x in expected]
    restored.add({"x": torch.tensor([10.0])})  # overwrites the oldest (or fills the next free row)
    after = restored.columns["x"][: restored.size].tolist()
    assert 10.0 in after and (min(expected) not in after) == (restored.size == len(expected))


def test_a_uniform_buffers_transitions_restore_into_a_prioritized_one_as_new_ones():
    uniform = DeviceReplayBuffer(8, {"x": torch.zeros(())}, CPU)
    uniform.add({"x": torch.arange(5.0)})
    assert torch.equal(uniform.sample(3)[WEIGHTS], torch.ones(3))
    buffer = prioritized()
    buffer.set_state(uniform.get_state(with_contents=True))
    assert buffer.size == 5 and torch.equal(buffer.priorities[:5], torch.ones(5))


def test_a_prioritized_round_reads_nothing_back():
    """Adds, a draw and its priorities set: queued work on a GPU, no host sync (``HostReads``)."""
    from tests.helpers import HostReads

    buffer = PrioritizedDeviceReplayBuffer(64, {"x": torch.zeros(3)}, CPU, 0, alpha=0.6, beta=0.4)
    with HostReads() as reads:
        buffer.add({"x": torch.randn(10, 3)})
        draws = buffer.sample(32)
        buffer.update_priorities(draws["x"].abs().sum(-1))
    assert reads.total == 0, reads.counts
