"""wire/assembly.py: a reward rank receives each prompt group into its rows of its chunk's
one packed buffer; the whole chunk is that buffer (hand-made rows, receives faked by copies)."""
import pytest
import torch

from fake_link import receive
from llamarl_core.wire.assembly import ChunkAssembly
from llamarl_core.wire.rollout import Rollout


def _group(replica, chunk, group, chunk_groups, size=2, length=5, completion=3, version=0):
    """Group `group` of a chunk, as a generator sends it: its rows carry recognisable values."""
    base = 100 * replica + 10 * chunk + group
    return Rollout(torch.full((size, length), base), torch.full((size,), 2), torch.full((size,), 3),
                   torch.full((size, completion), float(base)), torch.zeros(size), torch.full((size,), base),
                   version, replica, chunk, group=group, chunk_groups=chunk_groups)


def test_interleaved_chunks_of_two_replicas_each_complete_in_group_order_without_a_copy():
    assembly = ChunkAssembly(group_size=2)
    order = [(0, 5, 1), (1, 5, 0), (0, 5, 0), (1, 5, 2), (1, 5, 1)]  # (replica, chunk, group)
    done = {}
    for replica, chunk, group in order:
        part = receive(assembly, _group(replica, chunk, group, chunk_groups=2 if replica == 0 else 3,
                                         version=group))
        part.rewards.fill_(group + 0.5)  # scored in place, as the reward rank does
        whole = assembly.add(part)
        if whole is not None:
            done[replica] = (whole, part)
    assert sorted(done) == [0, 1]
    for replica, groups in ((0, 2), (1, 3)):
        whole, last = done[replica]
        assert whole.num_rows == 2 * groups and whole.replica == replica and whole.chunk == 5
        assert whole.example_ids.tolist() == [100 * replica + 50 + g for g in range(groups) for _ in range(2)]
        assert whole.rewards.tolist() == [g + 0.5 for g in range(groups) for _ in range(2)]
        assert whole.policy_version == 0  # the oldest row's
        # the last part's rows are rows of the whole chunk: the same storage, not a copy
        assert last.packed[0].untyped_storage().data_ptr() == whole.packed[0].untyped_storage().data_ptr()
        assert whole.rows(0, 2).packed[1].untyped_storage().data_ptr() == whole.packed[1].untyped_storage().data_ptr()


def test_a_whole_chunk_message_is_its_own_chunk():
    assembly = ChunkAssembly(group_size=2)
    part = receive(assembly, _group(0, 1, 0, chunk_groups=0))
    assert assembly.add(part) is part


def test_a_group_that_does_not_fit_its_chunk_names_replica_chunk_and_group():
    assembly = ChunkAssembly(group_size=2)
    receive(assembly, _group(3, 7, 0, chunk_groups=2))
    with pytest.raises(ValueError, match="replica 3 chunk 7 group 1"):
        receive(assembly, _group(3, 7, 1, chunk_groups=2, length=6))


def test_the_chunk_and_group_cross_the_wire():
    sent = _group(1, 3, 0, chunk_groups=2)
    got = receive(ChunkAssembly(group_size=2), sent)
    assert (got.replica, got.chunk, got.group, got.chunk_groups) == (1, 3, 0, 2)
    assert sent.header().tolist() == [2, 5, 3, 0, 1, 3, 0, 2]


