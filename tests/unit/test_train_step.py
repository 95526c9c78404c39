"""A step whose micro-batches start as its groups arrive (executors/train_step.py, early) makes the
update the same step makes on the whole batch at once: the same gradient (its loss weights are known
only at the end, so the gradient is scaled then), the same metrics, and micro-batches that ran
before the last group came."""
import pytest
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.executors.rl_step import rl_step
from llamarl_core.executors.train_step import TrainStep, train_on
from llamarl_core.models import Llama, get_preset, with_overrides
from llamarl_core.wire.rollout import Rollout

GROUP = 2


def _batch(rewards=(1.0, 0, 0, 1, 1, 0, 1, 0), seed=0):
    """4 groups of 2, completions of 1-12 tokens after prompts of 3-6, off-policy log mu."""
    g = torch.Generator().manual_seed(seed)
    n = 8
    prompt_lens = torch.tensor([4, 3, 6, 5, 4, 4, 3, 6])
    completion_lens = torch.tensor([1, 12, 3, 7, 12, 2, 5, 9])
    tokens = torch.zeros(n, 6 + 12, dtype=torch.long)
    for r in range(n):
        used = int(prompt_lens[r] + completion_lens[r])
        tokens[r, :used] = torch.randint(3, 200, (used,), generator=g)
    behavior = -torch.rand(n, 6 + 12 - 1, generator=g)  # log mu at the targets [n, L-1]
    return Rollout(tokens, prompt_lens, completion_lens, behavior, torch.tensor(rewards),
                   torch.arange(n) // GROUP, 0, 0, 0)


def _learner(micro: int, overrides=()) -> tuple[Llama, Learner]:
    cfg = load_config("cpu_tiny", [f"algorithm.group_size={GROUP}", f"resources.trainer.micro_batch_size={micro}",
                                   *overrides])
    torch.manual_seed(0)
    model = Llama(with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2,
                                 ffn_dim=64, max_seq_len=32))
    return model, Learner(model, learner_config(cfg))


def _capture(model, learner):
    captured = []
    learner.optimizer.step = lambda: captured.append([p.grad.clone() for p in model.parameters()])
    return captured


def _whole(micro, overrides=(), batch=None):
    model, learner = _learner(micro, overrides)
    grads = _capture(model, learner)
    metrics = train_on(learner, batch or _batch(), torch.tensor([0.0, 0, 1, 1, 0, 0, 1, 1]))
    return grads[0], metrics


def _streamed(micro, overrides=(), batch=None):
    """The batch's groups added one at a time, full micro-batches run after each."""
    model, learner = _learner(micro, overrides)
    grads = _capture(model, learner)
    batch, staleness = batch or _batch(), torch.tensor([0.0, 0, 1, 1, 0, 0, 1, 1])
    step, ran_before_last = TrainStep(learner, early=True), []
    for lo in range(0, batch.num_rows, GROUP):
        step.add(batch.rows(lo, lo + GROUP), staleness[lo:lo + GROUP])
        step.run_ready()
        ran_before_last.append(step.micro_batches)
    metrics = step.finish(batch, staleness)
    return grads[0], metrics, ran_before_last, step


# Metrics a micro-batch computes as a whole (ESS), or as a token mean while the step weighs micro-
# batches by rows (sequence_mean), depend on where the batch is cut: the two layouts cut it apart.
CUT_DEPENDENT = {"ess", "tokens_per_s"}
TOKEN_MEANS = {"entropy", "is_ratio_mean", "mismatch_kl"}


@pytest.mark.parametrize("overrides,ran_want,cut_dependent", [
    ((), [0, 1, 2, 2], CUT_DEPENDENT),
    (("algorithm.aggregation=sequence_mean",), [0, 1, 2, 2], CUT_DEPENDENT | TOKEN_MEANS),
    # DAPO's length penalty (cap 12, buffer 4) takes 1 off group 2's 12-token row scoring 1: both of
    # its rows score 0, so it is skipped
    (("algorithm.overlong=penalty", "algorithm.overlong_buffer_tokens=4", "generation.max_new_tokens=12"),
     [0, 1, 1, 2], CUT_DEPENDENT)], ids=["token_mean", "sequence_mean", "overlong_penalty"])
def test_groups_streamed_in_give_the_whole_batch_gradient_and_metrics(overrides, ran_want, cut_dependent):
    want, want_metrics = _whole(micro=3, overrides=overrides)
    got, metrics, ran, _ = _streamed(micro=3, overrides=overrides)
    assert ran == ran_want  # micro-batches ran after the 2nd and 3rd group, before the last came
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)
    assert set(metrics) == set(want_metrics)
    for k in set(want_metrics) - cut_dependent:
        assert metrics[k] == pytest.approx(want_metrics[k], rel=1e-4, abs=1e-7), k


def test_the_gradient_is_scaled_by_the_whole_steps_tokens_not_each_micro_batchs():
    """Without the final division the gradient would be (total tokens)x the whole batch's."""
    want, _ = _whole(micro=8)
    got, _, _, step = _streamed(micro=3)
    norm = lambda gs: torch.sqrt(sum((g.double() ** 2).sum() for g in gs))  # noqa: E731
    assert float(norm(got)) == pytest.approx(float(norm(want)), rel=1e-4)


def test_rows_whose_groups_scored_alike_are_skipped_but_count_in_the_weights():
    """Groups 0 and 1 score alike (zero advantage: skipped on one rank); their tokens still weigh."""
    batch = _batch(rewards=(1.0, 1, 0, 0, 1, 0, 1, 0))
    want, want_metrics = _whole(micro=2, batch=batch)
    got, metrics, ran, _ = _streamed(micro=2, batch=_batch(rewards=(1.0, 1, 0, 0, 1, 0, 1, 0)))
    assert ran == [0, 0, 1, 2]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)
    assert metrics["trained_rows_frac"] == want_metrics["trained_rows_frac"] == 0.5


def test_a_step_with_no_trained_row_steps_adam_on_zero_gradients_like_the_whole_batch():
    batch = _batch(rewards=(1.0,) * 8)
    want, want_metrics = _whole(micro=3, batch=batch)
    got, metrics, ran, step = _streamed(micro=3, batch=_batch(rewards=(1.0,) * 8))
    assert ran == [0, 0, 0, 0] and step.micro_batches == 0
    assert all(float(g.abs().max()) == 0 for g in got) and all(float(w.abs().max()) == 0 for w in want)
    assert metrics["loss"] == want_metrics["loss"] == 0.0


def test_more_than_one_update_per_batch_is_refused():
    _, learner = _learner(3, ("algorithm.updates_per_batch=2",))
    with pytest.raises(ValueError, match="updates_per_batch"):
        TrainStep(learner, early=True)


class _PieceFeed:
    """Hands the step's groups on one at a time and records which spans were open meanwhile;
    with `idle`, nothing more has arrived after each group (the feed calls `on_idle`)."""

    def __init__(self, spans, idle=False):
        self.spans, self.idle = spans, idle

    def collect(self, step, version, on_groups=None, on_idle=None):
        batch, staleness = _batch(), torch.zeros(8)
        for lo in range(0, 8, GROUP):
            self.spans.append(("arrived", lo // GROUP))
            on_groups([batch.rows(lo, lo + GROUP)], staleness[lo:lo + GROUP])
            if self.idle and lo + GROUP < 8:
                on_idle()
        return batch, staleness, 0.0


class _Span:
    def __init__(self, spans):
        self.spans = spans

    def __call__(self, state, **info):
        outer = self

        class Span:
            def __enter__(self):
                outer.spans.append(("open", state))

            def __exit__(self, *exc):
                outer.spans.append(("close", state))
        return Span()


class _Publisher:
    def publish(self, version):
        return {}


def _recording(learner, spans):
    """Every micro-batch's forward goes into `spans` as ("micro", rows)."""
    micro_loss = learner.micro_loss

    def recorded(tokens, *args, **kwargs):
        spans.append(("micro", tokens.shape[0]))
        return micro_loss(tokens, *args, **kwargs)
    learner.micro_loss = recorded
    return learner


def _train(*micro_rows):
    return [("open", "train"), *(("micro", n) for n in micro_rows), ("close", "train")]


def test_rl_step_trains_micro_batches_in_their_own_spans_while_the_feed_still_collects():
    spans = []
    _, learner = _learner(3)
    done = rl_step(_PieceFeed(spans), _recording(learner, spans), _Publisher(), 0, 0, lambda: False,
                   span=_Span(spans), stream_groups=True)
    # each arrival in a train span (its rows' advantages and masks); a 3-row micro-batch after the
    # 2nd and 3rd groups, the last 2 rows once the feed returned
    assert spans == [("arrived", 0), *_train(), ("arrived", 1), *_train(3), ("arrived", 2), *_train(3),
                     ("arrived", 3), *_train(), *_train(2)]
    assert done.version == 1 and done.batch.num_rows == 8 and learner.steps_done == 1


def test_when_nothing_has_arrived_the_trainer_runs_the_rows_it_holds_instead_of_waiting():
    spans = []
    model, learner = _learner(3)
    grads = _capture(model, learner)
    rl_step(_PieceFeed(spans, idle=True), _recording(learner, spans), _Publisher(), 0, 0, lambda: False,
            span=_Span(spans), stream_groups=True)
    # each group's 2 rows run at once when nothing else came (a short micro-batch)
    assert spans == [("arrived", 0), *_train(), *_train(2), ("arrived", 1), *_train(), *_train(2),
                     ("arrived", 2), *_train(), *_train(2), ("arrived", 3), *_train(), *_train(2)]
    want, _ = _whole(micro=3)
    for g, w in zip(grads[0], want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("overrides,on", [
    ((), True),
    (("resources.trainer.stream_groups=false",), False),
    (("algorithm.updates_per_batch=2",), False),
    (("algorithm.dynamic_sampling=true",), False),
    (("resources.trainer.num_devices=2", "resources.cpu_cores=4"), False)],
    ids=["default", "off", "two-updates", "dynamic-sampling", "two-trainer-ranks"])
def test_the_plan_shows_whether_the_trainer_streams_groups_as_the_runtime_builds_it(overrides, on):
    from llamarl_core.plan.plan import make_plan
    cfg = load_config("cpu_tiny", list(overrides))
    trainer = make_plan(cfg, require_data=False).to_json()["roles"][1]
    assert trainer["name"] == "trainer" and trainer["stream_groups"] is on
    assert learner_config(cfg).stream_groups is on  # what the trainer executor hands rl_step


def test_sync_mode_has_no_early_micro_batches():
    from llamarl_core.plan.plan import make_plan
    cfg = load_config("cpu_tiny_sync", [])
    assert learner_config(cfg).stream_groups is False
    assert all("stream_groups" not in r for r in make_plan(cfg, require_data=False).to_json()["roles"])


def test_a_step_with_no_rows_left_by_dynamic_sampling_still_steps_with_pi_old_on():
    """Dynamic sampling may find no informative group: two updates x two mini-batches of nothing
    step Adam on zero gradients, as one update does."""
    model, learner = _learner(3, ("algorithm.updates_per_batch=2", "algorithm.mini_batches=2"))
    grads = _capture(model, learner)
    metrics = train_on(learner, _batch().select(torch.arange(0)), torch.zeros(0))
    assert len(grads) == 4 and all(float(g.abs().max()) == 0 for step in grads for g in step)
    assert metrics["loss"] == 0.0 and metrics["tokens_total"] == 0.0 and learner.steps_done == 1
