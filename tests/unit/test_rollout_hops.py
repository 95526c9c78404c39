"""docs/ARCHITECTURE.md's rollout path is the path the code takes: one chunk is driven through
the functions the roles call (generator chunk → wire → reward assembly and routing → wire →
trainer batch → loss) with each listed hand-off instrumented, in one process; the gloo
send/receive between processes is a copy into the tensors the receiver posts
(`transport/channels.py: recv_rollout_blocking`, run here on a fake link)."""
import re
from pathlib import Path

import pytest
import torch

from fake_link import FakeLink

from llamarl_core.config.load import load_config
from llamarl_core.executors import chunks as chunks_mod, learner as learner_mod
from llamarl_core.executors.train_step import TrainStep
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.train_step import train_on
from llamarl_core.executors.pipeline import chunk_config, learner_config
from llamarl_core.executors.routing import chunk_slices_for_trainers
from llamarl_core.executors.setup import PromptSet
from llamarl_core.generation import scheduler
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs
from llamarl_core.transport.channels import recv_rollout_blocking
from llamarl_core.wire import rollout as wire
from llamarl_core.wire.assembly import ChunkAssembly
from llamarl_core.wire.rollout import Rollout

ROOT = Path(__file__).resolve().parents[2]
TOK = ByteTokenizer()
PROMPTS = [TOK.encode(t, add_bos=True) for t in ("1+2=", "30+4=", "5+55=", "7+8=")]


def documented_hops() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## A rollout's log-probs, from the sampler to `aipo_loss`", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^(\d+)\. \*\*(\w+)\*\* `([\w.]+)`", section, flags=re.M)
    assert [n for n, _, _ in items] == [str(i + 1) for i in range(len(items))]
    return [(role, fn) for _, role, fn in items]


class Recorder:
    def __init__(self, monkeypatch):
        self.role, self.calls = "generator", []
        targets = {"Batch._sample": (scheduler.Batch, "_sample", False),
                   "Batch._emit": (scheduler.Batch, "_emit", False),
                   "_Groups.add": (chunks_mod._Groups, "add", False),
                   "_pack": (wire, "_pack", False), "Rollout.unpack": (Rollout, "unpack", True),
                   "ChunkAssembly.buffers": (ChunkAssembly, "buffers", False),
                   "ChunkAssembly.add": (ChunkAssembly, "add", False),
                   "Rollout.rows": (Rollout, "rows", False), "concat": (wire, "concat", False),
                   "TrainStep._inputs": (TrainStep, "_inputs", False),
                   "aipo_loss": (learner_mod, "aipo_loss", False)}
        for name, (owner, attr, static) in targets.items():
            original = getattr(owner, attr)

            def spy(*args, _name=name, _original=original, **kwargs):
                self.calls.append((self.role, _name))
                return _original(*args, **kwargs)
            monkeypatch.setattr(owner, attr, staticmethod(spy) if static else spy)
        # every concatenation, wherever it is called from: a copy of rows, not a hand-off
        self.cats = {"generator": 0, "reward": 0, "trainer": 0}
        cat = torch.cat

        def counted_cat(*args, **kwargs):
            self.cats[self.role] += 1
            return cat(*args, **kwargs)
        monkeypatch.setattr(torch, "cat", counted_cat)

    def first_calls(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys(self.calls))

    def count(self, role: str, name: str) -> int:
        return sum(c == (role, name) for c in self.calls)


def _wire(header, ints, floats):
    """What the gloo link does between two processes: the receiver gets its own copy."""
    return header.clone(), ints.clone(), floats.clone()


def test_one_chunk_takes_the_documented_hops_packed_once_and_never_re_packed(monkeypatch):
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.prompts_per_step=2",
                                   "generation.max_new_tokens=12", "generation.max_prompt_tokens=8",
                                   "resources.generator.max_batch_size=4", "algorithm.lr_warmup_steps=0"])
    torch.manual_seed(0)
    model = Llama(ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                            max_seq_len=64, rope_theta=10000.0))
    rec = Recorder(monkeypatch)
    gen = ChunkGenerator(chunk_config(cfg), model, TOK, PromptSet([None] * 4, PROMPTS), 0, 1)
    learner = Learner(model, learner_config(cfg))
    a = cfg.algorithm
    # generator: each prompt group leaves as it ends, packed on the sender's thread (outside the
    # engine's inference mode, which is per thread)
    groups = []
    whole = gen.generate(0, 0, on_group=groups.append)
    on_wire = [_wire(*part.to("cpu").pack()) for part in groups]
    # reward rank: receive each group into its rows of the chunk, score it in place, route each
    # trainer rank its rows of the whole chunk (executors/reward.py), groups arriving out of order
    rec.role = "reward"
    assembly, link, chunk = ChunkAssembly(a.group_size), FakeLink(on_wire[::-1]), None
    received = set()  # the storages the receives wrote into

    def into(header):
        ints, floats = assembly.buffers(header)
        received.update(t.untyped_storage().data_ptr() for t in (ints, floats))
        return ints, floats
    for _ in on_wire:
        part = recv_rollout_blocking(link, 1, into)
        part.rewards.copy_(torch.tensor([1.0, 0.0]))  # rewards differ within the group: it trains
        chunk = assembly.add(part)
    trainers = 2
    routed = [chunk.rows(lo, hi) for _, lo, hi in chunk_slices_for_trainers(0, 1, trainers, a.prompts_per_step,
                                                                            a.group_size)]
    sent = [_wire(*r.pack()) for r in routed]
    # trainer rank 0: its rows of the step, the step
    rec.role = "trainer"
    batch = wire.concat([Rollout.unpack(*sent[0])])
    train_on(learner, batch, torch.zeros(batch.num_rows))

    assert rec.first_calls() == documented_hops()
    assert rec.count("generator", "_pack") == len(on_wire) == 2     # once per group, on the generator
    assert rec.count("reward", "_pack") == rec.count("trainer", "_pack") == 0  # never re-packed
    # the reward rank forwards the rows it received, where it received them: no concatenation
    assert rec.count("reward", "concat") == 0 and rec.cats["reward"] == 0
    assert len(received) == 2  # both groups went into the chunk's one pair of buffers
    assert len(routed) == 2 and all({t.untyped_storage().data_ptr() for t in r.packed} == received for r in routed)
    assert rec.count("reward", "Rollout.unpack") == 2 and rec.count("trainer", "Rollout.unpack") == 1
    # what the trainer trains on is what the generator sampled (rows of group 0) and scored
    torch.testing.assert_close(batch.tokens, whole.tokens[:2])
    torch.testing.assert_close(batch.behavior_logprobs, whole.behavior_logprobs[:2])
    assert batch.rewards.tolist() == [1.0, 0.0]
    torch.testing.assert_close(chunk.tokens, whole.tokens)  # group order kept though they came reversed
    assert chunk.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]


def test_a_rollout_whose_field_was_replaced_is_packed_again_not_sent_stale():
    r = Rollout(torch.ones(2, 3, dtype=torch.long), torch.ones(2, dtype=torch.long), torch.ones(2, dtype=torch.long),
                torch.zeros(2, 2), torch.zeros(2), torch.arange(2), 0, 0, 0)
    got = Rollout.unpack(*_wire(*r.pack()))
    got.rewards = torch.tensor([1.0, 2.0])  # no longer a view of the received floats
    assert Rollout.unpack(*got.pack()).rewards.tolist() == [1.0, 2.0]
    views = Rollout.unpack(*_wire(*r.pack()))
    views.rewards.copy_(torch.tensor([3.0, 4.0]))  # in place: the packed tensors are sent as they are
    header, ints, floats = views.pack()
    assert floats is views.packed[1] and floats[:, -1].tolist() == [3.0, 4.0]


@pytest.mark.parametrize("rows", [(0, 1), (1, 2), (0, 2)])
def test_rows_and_concat_of_packed_rollouts_equal_the_unpacked_ones(rows):
    g = torch.Generator().manual_seed(1)
    r = Rollout(torch.randint(0, 9, (2, 5), generator=g), torch.tensor([2, 3]), torch.tensor([3, 2]),
                torch.rand(2, 3, generator=g), torch.tensor([0.5, 1.0]), torch.tensor([4, 4]), 1, 2, 7,
                policy_versions=torch.tensor([1, 2]))
    packed = Rollout.unpack(*_wire(*r.pack()))
    lo, hi = rows
    for got, want in ((packed.rows(lo, hi), r.rows(lo, hi)),
                      (wire.concat([packed, packed]), wire.concat([r, r]))):
        for f in wire.TENSOR_FIELDS:
            assert torch.equal(getattr(got, f), getattr(want, f)), f
        assert (got.policy_version, got.replica, got.chunk) == (want.policy_version, want.replica, want.chunk)
