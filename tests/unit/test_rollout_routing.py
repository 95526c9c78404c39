"""Pure pieces of the runtime: rollout packing, row routing, target alignment, prompt order."""
import torch

from llamarl_core.executors.learner import completion_targets
from fake_link import receive
from llamarl_core.wire.assembly import ChunkAssembly
from llamarl_core.wire.rollout import Rollout, concat, staleness_per_row
from llamarl_core.executors.routing import chunk_slices_for_trainers, replicas_for_trainer
from llamarl_core.executors.setup import chunk_prompt_indices


def make_rollout(version=3, replica=1, chunk=7):
    # Row 0: prompt [5, 6, 7] + completion [8, 9]; row 1: prompt [5] + completion [4, 3, 2].
    # Log mu at next-token targets: column t is token t+1's, so row 0's sit at 2, 3, row 1's at 0, 1, 2.
    tokens = torch.tensor([[5, 6, 7, 8, 9, 0], [5, 4, 3, 2, 0, 0]])
    return Rollout(tokens, torch.tensor([3, 1]), torch.tensor([2, 3]),
                   torch.tensor([[0, 0, -0.1, -0.2, 0], [-0.3, -0.4, -0.5, 0, 0]]), torch.tensor([1.0, 0.0]),
                   torch.tensor([11, 12]), version, replica, chunk)


def test_a_rollout_survives_packing():
    r = make_rollout()
    header, ints, floats = r.pack()
    back = Rollout.unpack(header, ints, floats)
    r.policy_versions, r.group, r.chunk_groups = torch.tensor([3, 4]), 2, 5
    back = Rollout.unpack(*r.pack())
    for field in ("tokens", "prompt_lens", "completion_lens", "behavior_logprobs", "rewards", "example_ids",
                  "policy_versions"):
        assert torch.equal(getattr(back, field), getattr(r, field)), field
    assert (back.policy_version, back.replica, back.chunk, back.group, back.chunk_groups) == (3, 1, 7, 2, 5)


def test_behavior_logprobs_line_up_with_next_token_targets():
    # Target position t predicts token t+1. Row 0's completion tokens sit at indices 3, 4 →
    # target positions 2, 3; row 1's at 1, 2, 3 → positions 0, 1, 2. L' = max(p + c) = 5.
    tokens, behavior, mask = completion_targets(make_rollout())
    assert tokens.shape == (2, 5)
    assert mask.tolist() == [[False, False, True, True], [True, True, True, False]]
    assert torch.allclose(behavior, torch.tensor([[0, 0, -0.1, -0.2], [-0.3, -0.4, -0.5, 0]]))


def test_concat_pads_and_staleness_counts_versions_behind():
    a, b = make_rollout(version=3), make_rollout(version=5)
    b.tokens = torch.nn.functional.pad(b.tokens, (0, 2))
    both = concat([a, b])
    assert both.tokens.shape == (4, 8) and both.policy_version == 3
    assert staleness_per_row([a, b], 6).tolist() == [3, 3, 1, 1]
    b.policy_versions = torch.tensor([5, 4])  # row 1 of b started under version 4 (a swap mid-row)
    assert staleness_per_row([a, b], 6).tolist() == [3, 3, 1, 2]


def test_a_chunk_is_assembled_in_group_order_once_every_group_arrived():
    parts = [make_rollout(chunk=7) for _ in range(3)]
    for g, part in zip((2, 0, 1), parts):
        part.group, part.chunk_groups, part.example_ids = g, 3, torch.tensor([g, g])
    assembly = ChunkAssembly(group_size=2)
    received = [receive(assembly, part) for part in parts]
    assert [assembly.add(part) for part in received[:2]] == [None, None]
    whole = assembly.add(received[2])
    assert whole.example_ids.tolist() == [0, 0, 1, 1, 2, 2] and whole.chunk_groups == 0


def test_rows_route_to_trainer_ranks_by_prompt_range():
    # 8 prompts x group 2 = 16 rows; 2 generator replicas (prompts 0-3, 4-7) feed 4 trainers
    # (prompts 0-1, 2-3, 4-5, 6-7): replica 1's rows 0-3 → trainer 2, rows 4-7 → trainer 3.
    assert chunk_slices_for_trainers(1, 2, 4, 8, 2) == [(2, 0, 4), (3, 4, 8)]
    assert replicas_for_trainer(3, 2, 4, 8) == [1]
    # One replica, two trainers: each trainer gets half the chunk.
    assert chunk_slices_for_trainers(0, 1, 2, 8, 2) == [(0, 0, 8), (1, 8, 16)]
    assert replicas_for_trainer(0, 4, 2, 8) == [0, 1]


def test_chunk_prompts_are_deterministic_and_cover_each_epoch_once():
    first = [i for n in range(5) for i in chunk_prompt_indices(10, n, 2, seed=0)]
    assert sorted(first) == list(range(10))  # chunks 0-4 are one epoch of 10 examples
    assert chunk_prompt_indices(10, 3, 2, seed=0) == chunk_prompt_indices(10, 3, 2, seed=0)
    assert chunk_prompt_indices(10, 0, 4, seed=1) != chunk_prompt_indices(10, 0, 4, seed=0)
