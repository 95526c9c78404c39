"""executors/late_chunk.py, the test hook that makes a chunk reach the trainer too stale: it
keeps only the first copy of its chunk back, until the generator holds version N + k + 1."""
import pytest
import torch

from llamarl_core.executors.late_chunk import ENV, LateChunk
from llamarl_core.wire.rollout import Rollout


def part(chunk: int, attempt: int = 0) -> Rollout:
    return Rollout(torch.zeros(2, 4, dtype=torch.long), torch.ones(2, dtype=torch.long),
                   torch.ones(2, dtype=torch.long), torch.zeros(2, 2), torch.zeros(2),
                   torch.zeros(2, dtype=torch.long), 0, 0, chunk, group=0, chunk_groups=1, attempt=attempt)


def test_only_the_first_copy_of_the_chunk_is_held_until_n_plus_k_plus_1():
    late = LateChunk(max_offpolicy_steps=1, chunk=3)
    held = part(3)
    assert late.hold(held) and not late.hold(part(4)) and not late.hold(part(3, attempt=1))
    assert late.due(4) == []            # 4 < 3 + 1 + 1: a trainer at 4 would still take it
    assert late.due(5) == [held] and late.due(6) == []
    late.hold(part(3))
    late.forget()                       # a new reward link: it is generated again
    assert late.due(9) == []


def test_unset_it_holds_nothing_and_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert not LateChunk(1).hold(part(0))
    monkeypatch.setenv(ENV, "zero")
    with pytest.raises(ValueError, match=ENV):
        LateChunk(1)
