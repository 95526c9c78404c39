"""docs/ARCHITECTURE.md's rollout path is the path the default run's code takes: one chunk goes
through a streaming generator, a reward rank forwarding each group as scored and the trainer's
early micro-batches (`rl_step` with stream_groups), each documented hand-off instrumented, in one
process; the gloo send/receive between processes is a copy into the tensors the receiver posts
(`transport/channels.py: recv_rollout_blocking`, run here on a fake link).

The test fails above 8 hand-offs or 2 layout changes, and counts the trainer's copies of the
rows from arrival to the loss: any call (cat, stack, index, gather, clone, .to) that makes a
new [rows, positions] tensor out of others, outside the model and the loss."""
import re
from pathlib import Path

import pytest
import torch

from fake_link import FakeLink

from llamarl_core.config.load import load_config
from llamarl_core.executors import chunks as chunks_mod, learner as learner_mod
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import chunk_config, learner_config
from llamarl_core.executors.reward import RewardExecutor
from llamarl_core.executors.rl_step import rl_step
from llamarl_core.executors.setup import PromptSet
from llamarl_core.executors.stream import ChunkStream
from llamarl_core.executors.train_step import TrainStep, train_on
from llamarl_core.generation import scheduler
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs
from llamarl_core.transport.channels import recv_rollout_blocking
from llamarl_core.wire import rollout as wire
from llamarl_core.wire.assembly import ChunkAssembly
from llamarl_core.wire.rollout import Rollout, concat, staleness_per_row

ROOT = Path(__file__).resolve().parents[2]
TOK = ByteTokenizer()
PROMPTS = [TOK.encode(t, add_bos=True) for t in ("1+2=", "30+4=", "5+55=", "7+8=")]
MAX_HOPS, MAX_LAYOUT_CHANGES = 8, 2


def documented_hops() -> tuple[list[tuple[str, str]], list[int]]:
    """(role, function) per documented hand-off, and the numbers of those marked layout changes."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## A rollout's log-probs, from the sampler to `aipo_loss`", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^(\d+)\. \*\*(\w+)\*\* `([\w.]+)`(.*)$", section, flags=re.M)
    assert [n for n, *_ in items] == [str(i + 1) for i in range(len(items))]
    return [(role, fn) for _, role, fn, _ in items], [int(n) for n, _, _, rest in items if "layout change" in rest]


class Recorder:
    HOPS = {"Batch._sample": (scheduler.Batch, "_sample", False), "Batch._emit": (scheduler.Batch, "_emit", False),
            "_Groups.add": (chunks_mod._Groups, "add", False), "Rollout.unpack": (Rollout, "unpack", True),
            "Rollout.rows": (Rollout, "rows", False), "TrainStep._inputs": (TrainStep, "_inputs", False),
            "aipo_loss": (learner_mod, "aipo_loss", False),
            # not hand-offs of the default path: each would be one more copy or layout change
            "_pack": (wire, "_pack", False), "Rollout.select": (Rollout, "select", False),
            "completion_targets": (learner_mod, "completion_targets", False)}
    COPIES = [(torch, "cat"), (torch, "stack"), (torch.Tensor, "__getitem__"), (torch.Tensor, "index_select"),
              (torch.Tensor, "gather"), (torch.Tensor, "clone"), (torch.Tensor, "to")]

    def __init__(self, monkeypatch):
        self.role, self.calls, self.results = "generator", [], {}
        for name, (owner, attr, static) in self.HOPS.items():
            original = getattr(owner, attr)

            def spy(*args, _name=name, _original=original, **kwargs):
                self.calls.append((self.role, _name))
                out = _original(*args, **kwargs)
                self.results.setdefault(_name, []).append((args, out))
                return out
            monkeypatch.setattr(owner, attr, staticmethod(spy) if static else spy)
        self.copies = {"reward": 0, "trainer": 0}
        self.counting = True
        for owner, attr in self.COPIES:
            original = getattr(owner, attr)

            def counted(*args, _original=original, **kwargs):
                out = _original(*args, **kwargs)
                if self.counting and self.role in self.copies and _new_rows(out, args):
                    self.copies[self.role] += 1
                return out
            monkeypatch.setattr(owner, attr, counted)

    def uncounted(self, f):
        """`f` with its copies not counted: the model's and the loss's own tensors are not the rows'."""
        def run(*args, **kwargs):
            counting, self.counting = self.counting, False
            try:
                return f(*args, **kwargs)
            finally:
                self.counting = counting
        return run

    def first_calls(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys(self.calls))

    def count(self, name: str) -> int:
        return sum(n == name for _, n in self.calls)


def _new_rows(out, args) -> bool:
    """Whether `out` is a new [rows, positions] tensor (not a view of an input)."""
    if not isinstance(out, torch.Tensor) or out.dim() < 2:
        return False
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    inputs += [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, torch.Tensor)]
    return all(out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() for t in inputs)


def _wire(rollout):
    """What AsyncSender and the gloo link do between two processes: the receiver gets its own copy."""
    return [torch.empty_like(t).copy_(t) for t in rollout.to("cpu").pack()]  # not counted: the link's


def test_one_chunk_takes_the_documented_hops_on_the_default_path_with_the_counted_copies(monkeypatch):
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.prompts_per_step=2",
                                   "generation.max_new_tokens=12", "generation.max_prompt_tokens=8",
                                   "resources.generator.max_batch_size=4", "algorithm.lr_warmup_steps=0",
                                   "resources.trainer.micro_batch_size=1"])
    a = cfg.algorithm
    torch.manual_seed(0)
    model = Llama(ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                            max_seq_len=64, rope_theta=10000.0))
    rec = Recorder(monkeypatch)
    learner = Learner(model, learner_config(cfg))
    learner.micro_loss = rec.uncounted(learner.micro_loss)
    # the backward pass recomputes checkpointed activations (the model's tensors, not the rows')
    monkeypatch.setattr(torch.Tensor, "backward", rec.uncounted(torch.Tensor.backward))
    # generator: the streaming engine run (executors/stream.py), one chunk; each prompt group leaves
    # as it ends and goes on the wire as it is
    gen = ChunkGenerator(chunk_config(cfg), model, TOK, PromptSet([None] * 4, PROMPTS), 0, 1)
    groups = []
    ChunkStream(gen).run(0, may_start=lambda n: n == 0, held=lambda: 0, on_group=groups.append)
    on_wire = [_wire(part) for part in groups]
    # reward rank: each group received into its rows of the chunk, scored in place, forwarded as
    # scored to the trainer rank whose slice holds it (executors/reward.py), arriving out of order
    rec.role = "reward"
    reward = RewardExecutor.__new__(RewardExecutor)
    reward.prompts_per_step, reward.group_size, reward.num_replicas, reward.trainer_ranks = (
        a.prompts_per_step, a.group_size, 1, [0])
    forwarded = []
    reward._send = lambda rows, j, outbox: forwarded.append(_wire(rows))
    assembly, link = ChunkAssembly(a.group_size), FakeLink(on_wire[::-1])
    for _ in on_wire:
        part = recv_rollout_blocking(link, 1, assembly.buffers)
        part.rewards.copy_(torch.tensor([1.0, 0.0]))  # rewards differ within the group: it trains
        assembly.add(part)
        reward._forward(part, outbox=None)
    # trainer: each group handed to the step as it is received (executors/feeds.py:
    # RewardFeed._collect_streamed), micro-batches started early; the feed's batch at the end
    rec.role = "trainer"

    class Feed:
        def collect(self, step, version, on_groups, on_idle):
            received = [recv_rollout_blocking(FakeLink([message]), 1) for message in forwarded]
            for part in received:
                on_groups([part], staleness_per_row([part], version))
            return concat(received), staleness_per_row(received, version), 0.0

    class Publisher:
        def publish(self, version):
            return {}
    done = rl_step(Feed(), learner, Publisher(), 0, 0, lambda: True, stream_groups=True)
    rec.role = "test"  # what the checks below compute is not counted

    hops, layout_changes = documented_hops()
    assert len(hops) <= MAX_HOPS and len(layout_changes) <= MAX_LAYOUT_CHANGES
    assert rec.first_calls() == hops
    assert rec.count("_pack") == rec.count("Rollout.select") == rec.count("completion_targets") == 0
    # layout change 1: each sample's log mu [c] goes to its rows' target columns p-1 .. p+c-2, and
    # stays there, column for column, up to the trainer's step
    samples = {args[1].index: args[1] for args, _ in rec.results["_Groups.add"]}
    chunk = concat(sorted(groups, key=lambda part: part.group))  # the generator's rows, in order
    for r, sample in samples.items():
        p, c = int(chunk.prompt_lens[r]), sample.token_ids.numel()
        mu = chunk.behavior_logprobs[r]                                            # [L-1]
        assert torch.equal(mu[p - 1:p - 1 + c], sample.logprobs) and not mu[:p - 1].any() and not mu[p - 1 + c:].any()
    trained = done.batch
    sent = concat(groups[::-1])  # the groups in the order they reached the trainer
    assert torch.equal(trained.tokens, sent.tokens) and torch.equal(trained.behavior_logprobs, sent.behavior_logprobs)
    assert trained.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
    # layout change 2: a micro-batch is its rows cut to their longest and stacked, log mu sliced
    micro_batches = rec.results["TrainStep._inputs"]
    for (step, ids, width), (tokens, behavior, mask) in micro_batches:
        rows = [step.rows[i] for i in ids]
        assert torch.equal(tokens, torch.stack([r.tokens[i, :width] for r, i in rows]))
        assert torch.equal(behavior, torch.stack([r.behavior_logprobs[i, :width - 1] for r, i in rows]))
        assert torch.equal(mask, torch.stack([r.loss_mask[i, :width - 1] for r, i in rows]) > 0)
    # copies: none on the reward rank; on the trainer one stack of token rows, one of log-mu rows and
    # one of loss-mask rows per micro-batch, and the feed's concatenation of the step's packed ints and floats
    assert len(micro_batches) == 4
    assert rec.copies == {"reward": 0, "trainer": 3 * len(micro_batches) + 2}


def test_the_whole_batch_step_with_pi_old_copies_rows_per_micro_batch_only(monkeypatch):
    """8 rows (4 informative groups of 2), micro-batches of 3, 2 updates x 2 mini-batches: the pi_old
    pass cuts 3 micro-batches (3, 3, 2 rows), each update's mini-batch of 4 rows 2 (3, 1)."""
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "resources.trainer.micro_batch_size=3",
                                   "algorithm.updates_per_batch=2", "algorithm.mini_batches=2"])
    torch.manual_seed(0)
    model = Llama(ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                            max_seq_len=64, rope_theta=10000.0))
    g = torch.Generator().manual_seed(0)
    batch = Rollout(torch.randint(3, 200, (8, 16), generator=g), torch.full((8,), 4), torch.arange(4, 12),
                    -torch.rand(8, 15, generator=g), torch.tensor([1.0, 0] * 4), torch.arange(8) // 2, 0, 0, 0)
    rec, learner = Recorder(monkeypatch), Learner(model, learner_config(cfg))
    forward, loss = learner.model.forward, learner.micro_loss

    learner.model.forward, learner.micro_loss = rec.uncounted(forward), rec.uncounted(loss)
    monkeypatch.setattr(torch.Tensor, "backward", rec.uncounted(torch.Tensor.backward))
    received = Rollout.unpack(*_wire(batch))
    rec.role = "trainer"
    train_on(learner, received, torch.zeros(8))
    rec.role = "test"
    # pi_old: 3 micro-batches x (tokens, log mu, mask) stacks; updates: 8 micro-batches x (tokens,
    # log mu, mask, their rows of pi_old)
    assert rec.count("TrainStep._inputs") == 3 + 8
    assert rec.copies["trainer"] == 3 * 3 + 8 * 4


def test_a_rollout_whose_field_was_replaced_is_packed_again_not_sent_stale():
    r = Rollout(torch.ones(2, 3, dtype=torch.long), torch.ones(2, dtype=torch.long), torch.ones(2, dtype=torch.long),
                torch.zeros(2, 2), torch.zeros(2), torch.arange(2), 0, 0, 0)
    got = Rollout.unpack(*_wire(r))
    got.rewards = torch.tensor([1.0, 2.0])  # no longer a view of the received floats
    assert Rollout.unpack(*got.pack()).rewards.tolist() == [1.0, 2.0]
    views = Rollout.unpack(*_wire(r))
    views.rewards.copy_(torch.tensor([3.0, 4.0]))  # in place: the packed tensors are sent as they are
    header, ints, floats = views.pack()
    assert floats is views.packed[1] and floats[:, -1].tolist() == [3.0, 4.0]


@pytest.mark.parametrize("rows", [(0, 1), (1, 2), (0, 2)])
def test_rows_and_concat_of_packed_rollouts_equal_the_unpacked_ones(rows):
    g = torch.Generator().manual_seed(1)
    r = Rollout(torch.randint(0, 9, (2, 5), generator=g), torch.tensor([2, 3]), torch.tensor([3, 2]),
                torch.rand(2, 3, generator=g), torch.tensor([0.5, 1.0]), torch.tensor([4, 4]), 1, 2, 7,
                policy_versions=torch.tensor([1, 2]))
    packed = Rollout.unpack(*_wire(r))
    lo, hi = rows
    for got, want in ((packed.rows(lo, hi), r.rows(lo, hi)),
                      (wire.concat([packed, packed]), wire.concat([r, r]))):
        for f in wire.TENSOR_FIELDS:
            assert torch.equal(getattr(got, f), getattr(want, f)), f
        assert (got.policy_version, got.replica, got.chunk) == (want.policy_version, want.replica, want.chunk)
