"""The roles wired to fakes of each other, in one process (no torchrun, no store, no links):
the seams of executors/ports.py are all a trainer or a generator needs."""
import functools

import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.generate_loop import SWAP_POLL_STEPS, GenerateLoop
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.train_step import train_on
from llamarl_core.executors.pipeline import chunk_config, learner_config
from llamarl_core.executors.rl_step import rl_step
from llamarl_core.executors.setup import PromptSet
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs
from llamarl_core.wire.rollout import Rollout

from fake_ports import FakeControl, LocalWeights

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                 max_seq_len=64, rope_theta=10000.0)
TOK = ByteTokenizer()
PROMPTS = [TOK.encode(t, add_bos=True) for t in ("1+2=", "30+4=", "5+55=", "7+8=")]


@functools.lru_cache(maxsize=None)  # composing a config costs more than what the tests run
def _cfg(*overrides):
    return load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.prompts_per_step=2",
                                    "algorithm.lr_warmup_steps=0", "algorithm.lr=0.01",
                                    "resources.trainer.micro_batch_size=4",
                                    "generation.max_new_tokens=20", "generation.max_prompt_tokens=8",
                                    "resources.generator.max_batch_size=2", *overrides])


def _model(seed=0):
    torch.manual_seed(seed)
    return Llama(ARGS)


def _generator(cfg, model, weights, control, k=1):
    chunks = ChunkGenerator(chunk_config(cfg), model, TOK, PromptSet(examples=[None] * 4, prompt_ids=PROMPTS),
                            replica=0, num_replicas=1)
    return GenerateLoop(chunks, weights, control, replica=0, global_rank=3, max_offpolicy_steps=k,
                        should_stop=lambda: False)


def _generate(loop, chunk, on_group=None):
    """Chunk `chunk` with the version held, looking for new weights between decode steps as the
    generator's stream does (GenerateLoop.swap_if_published)."""
    return loop.chunks.generate(chunk, loop.held, on_group=on_group, between_steps=loop.swap_if_published)


def test_a_generator_holds_no_weights_until_the_first_version_arrives_then_stays_in_the_window():
    trainer, gen = _model(0), _model(1).requires_grad_(False)
    weights, control = LocalWeights(trainer, gen), FakeControl()
    loop = _generator(_cfg(), gen, weights, control, k=1)
    assert not loop.may_generate(0)                     # [W0]: nothing held yet
    weights.publish(0)
    assert weights.ready()
    loop.receive()
    assert loop.held == 0 and control.held == [(3, 0)]
    assert all(torch.equal(p, q) for p, q in zip(gen.parameters(), trainer.parameters()))
    # [W2]: chunk n is trained at step n - extra, so with v0 and k = 1 chunks 0 and 1 may start
    assert loop.may_generate(0) and loop.may_generate(1)
    assert not loop.may_generate(2)
    control.add_extra(0)                                # a step took one extra chunk of this replica
    assert loop.may_generate(2)


def test_a_generator_adopts_a_version_published_mid_chunk_between_decode_steps():
    trainer, gen = _model(0), _model(1).requires_grad_(False)
    weights, control = LocalWeights(trainer, gen), FakeControl()
    loop = _generator(_cfg(), gen, weights, control)
    weights.publish(0)
    loop.receive()
    with torch.no_grad():                               # the trainer's next version differs
        for p in trainer.parameters():
            p.mul_(0.5)
    weights.publish_at_look(1, version=1)               # lands at the first look inside the chunk
    groups = []
    rollout = _generate(loop, 0, on_group=groups.append)
    # 4 rows on 2 slots: the first two ran 20 decode steps under v0, swapped after step
    # SWAP_POLL_STEPS, the two refilled later were admitted under v1
    assert SWAP_POLL_STEPS < 20
    assert loop.held == 1 and control.held == [(3, 0), (3, 1)]
    assert rollout.policy_version == 0 and sorted(rollout.policy_versions.tolist()) == [0, 0, 1, 1]
    assert sorted(g.group for g in groups) == [0, 1] and rollout.num_rows == 4
    assert all(torch.equal(p, q) for p, q in zip(gen.parameters(), trainer.parameters()))


class FakeFeed:
    """A RolloutFeed of hand-built rows: 2 prompts x 2 samples, the first of each group right."""

    replicas, next_chunk = 1, {}

    def __init__(self):
        self.calls, self.peers = [], []

    def collect(self, step, version):
        self.calls.append((step, version))
        g = torch.Generator().manual_seed(step)
        tokens = torch.randint(3, 200, (4, 12), generator=g)
        batch = Rollout(tokens, torch.full((4,), 4), torch.full((4,), 8), -torch.rand(4, 11, generator=g),
                        torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]), version, 0, step)
        return batch, torch.zeros(4), 0.0

    def wait_for_peers(self, step):
        self.peers.append(step)


def test_a_trainer_fed_by_a_fake_feed_trains_each_step_and_publishes_every_version_but_the_last():
    model = _model(0)
    learner = Learner(model, learner_config(_cfg()))
    feed, publisher = FakeFeed(), LocalWeights(model, _model(1))
    version, before = 0, [p.detach().clone() for p in model.parameters()]
    for step in range(3):
        done = rl_step(feed, learner, publisher, step, version, is_last=lambda: step == 2)
        after = [p.detach().clone() for p in model.parameters()]
        assert any(not torch.equal(a, b) for a, b in zip(after, before)), f"step {step} changed nothing"
        assert torch.isfinite(torch.tensor(done.metrics["loss"]))
        before, version = after, done.version
    assert feed.calls == [(0, 0), (1, 1), (2, 2)] and feed.peers == [0, 1, 2]
    assert publisher.published == [1, 2] and done.last and done.sync is None
    assert learner.steps_done == 3


def test_trainer_tokens_total_counts_every_trained_token_of_the_step():
    # 4 rows x 8 completion tokens, every group informative: 32 tokens, however the rows are cut
    # into micro-batches (a mean over micro-batches of 1 row said 8) and summed over 2 updates
    for micro, updates, want in ((4, 1, 32.0), (1, 1, 32.0), (1, 2, 64.0)):
        cfg = _cfg(f"resources.trainer.micro_batch_size={micro}", f"algorithm.updates_per_batch={updates}")
        learner = Learner(_model(0), learner_config(cfg))
        batch, staleness, _ = FakeFeed().collect(0, 0)
        assert train_on(learner, batch, staleness)["tokens_total"] == want, (micro, updates)


def test_a_trainer_and_a_generator_wired_in_one_process_train_on_generated_rows():
    cfg = _cfg()
    trainer, gen = _model(0), _model(0).requires_grad_(False)
    weights, control = LocalWeights(trainer, gen), FakeControl()
    loop, learner = _generator(cfg, gen, weights, control), Learner(trainer, learner_config(cfg))

    class GeneratedFeed(FakeFeed):  # generates chunk v with what it holds; "reward": even length
        def collect(self, step, version):
            self.calls.append((step, version))
            while weights.ready():
                loop.receive()
            rollout = _generate(loop, step)
            rollout.rewards = (rollout.completion_lens % 2 == 0).float()
            return rollout, version - rollout.policy_versions, 0.0

    feed = GeneratedFeed()
    weights.publish(0)
    version = 0
    for step in range(2):
        done = rl_step(feed, learner, weights, step, version, is_last=lambda: False)
        version = done.version
    assert feed.calls == [(0, 0), (1, 1)] and control.held[:2] == [(3, 0), (3, 1)]
    assert weights.published == [0, 1, 2]
