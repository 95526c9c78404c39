"""`evaluate`: generate, verify and summarise one rank's share of a data set.

The one evaluation path: `llamarl eval` and the trainer's periodic held-out evaluation both
call `evaluate` with the generator's `GenerationEngine` and the training reward, so a
checkpoint scores the same number in both places.

    examples ─ batches of B = batch_size // n ─┬─ greedy pass (T = 0)       → accuracy
                (batch b on rank b % world)    └─ n samples each (T > 0)    → pass@k, maj@k
                                                  seed = seed + b
             ─ rewards (one RewardPool.score per rank, or reward_fn per item) ─ summarize

Why batches are cut in global example order and seeded by their index: a batch holds the
same rows whatever the number of ranks, so data-parallel evaluation returns the same
completions as one process (`merge_results` restores the order by `index`).
Greedy (`temperature == 0`) generates once and that completion is the only sample, so
pass@1 = accuracy; with `temperature > 0` a separate greedy pass gives accuracy.

With an environment (`episodes`, an `EvalEpisodes`: env.enabled) every sample is a multi-turn
episode, streamed as training streams them (eval/episodes.py), and scored by training's rule
(envs/protocol.py): the sum of its step rewards, else the verifier on its last assistant turn.
A prediction then also holds each sample's rendered episode (`episodes`, `greedy_episode`),
its environment's reward (`env_rewards`, `greedy_env_reward`; None: the verifier scored it)
and its `turns`, `tool_calls`, `tool_errors`, `truncated`; the summary adds their means.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from llamarl_core.config.schema import check_eval_sampling
from llamarl_core.data import Example, PromptFormat, render_prompt, render_target
from llamarl_core.eval.answers import answer_fn_for
from llamarl_core.eval.metrics import EPISODE_COUNTS, is_correct, summarize
from llamarl_core.generation import SamplingParams


@dataclass
class EvalResult:
    summary: dict                       # see metrics.summarize; pass@k/maj@k keyed by int k
    predictions: list[dict] = field(default_factory=list)  # one per example, in data order


def encode_prompt(example: Example, template: "PromptFormat | str", tokenizer) -> list[int]:
    """Prompt token ids, rendered exactly as training renders them (`template`: the
    `PromptFormat` of `data.prompt_format`, or a bare template name)."""
    return tokenizer.encode(render_prompt(example, template, tokenizer))


def evaluate(engine, tokenizer, examples: list[Example], reward_fn: Callable[[str, str], float], *,
             template: "PromptFormat | str" = "plain", n_samples: int = 1, temperature: float = 0.0,
             max_new_tokens: int = 32, stop_strings=(), seed: int = 0, batch_size: int = 64,
             progress: "bool | Callable[[int, int], None]" = False, reward_pool=None, rank: int = 0, world_size: int = 1,
             top_p: float = 1.0, episodes=None) -> EvalResult:
    """Accuracy, pass@k and maj@k of `engine` on this rank's share of `examples`.

    `reward_pool` (a `RewardPool`), when given, scores all completions in one batch call
    instead of `reward_fn` per item. `rank`/`world_size` select batches b with
    b % world_size == rank; merge ranks with `merge_results`. `episodes`: an `EvalEpisodes`
    (eval/episodes.py) when every sample is an episode; its owner closes it.
    """
    predictions = generate_predictions(
        engine, tokenizer, examples, template=template, n_samples=n_samples,
        temperature=temperature, max_new_tokens=max_new_tokens, stop_strings=stop_strings,
        seed=seed, batch_size=batch_size, progress=progress, rank=rank,
        world_size=world_size, top_p=top_p, episodes=episodes)
    score_predictions(predictions, reward_fn, reward_pool=reward_pool, examples=examples)
    return EvalResult(summarize(predictions), predictions)


def generate_predictions(engine, tokenizer, examples: Sequence[Example], *, template: "PromptFormat | str" = "plain",
                         n_samples: int = 1, temperature: float = 0.0, max_new_tokens: int = 32,
                         stop_strings=(), seed: int = 0, batch_size: int = 64,
                         progress: "bool | Callable[[int, int], None]" = False, rank: int = 0, world_size: int = 1,
                         top_p: float = 1.0, episodes=None) -> list[dict]:
    """Unscored predictions (completions, finish reasons, token counts) for this rank."""
    _check_args(n_samples, temperature, batch_size, rank, world_size)
    sampled = temperature > 0
    n = n_samples if sampled else 1
    per_batch = max(1, batch_size // n)
    greedy = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0,
                            stop_strings=tuple(stop_strings))
    sample = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                            stop_strings=tuple(stop_strings))
    starts = list(range(0, len(examples), per_batch))
    mine = [(b, s) for b, s in enumerate(starts) if b % world_size == rank]
    predictions: list[dict] = []
    with _progress_bar(progress, sum(len(examples[s:s + per_batch]) for _, s in mine)) as advance:
        for b, start in mine:
            batch = examples[start:start + per_batch]
            prompts = [_prompt_ids(ex, template, tokenizer, engine) for ex in batch]
            # Greedy only: a row is done when the engine finishes it, so the bar moves within a
            # batch (one batch is the whole eval when it fits max_batch_size). Sampled: per batch.
            per_row = {"on_finish": lambda _: advance(1)} if progress and not sampled else {}
            greedy_out = _samples(engine, episodes, batch, prompts, greedy, seed + b, **per_row)
            sampled_out = (_samples(engine, episodes, [x for x in batch for _ in range(n)],
                                    [p for p in prompts for _ in range(n)], sample, seed + b)
                           if sampled else None)
            for i, ex in enumerate(batch):
                samples = sampled_out[i * n:(i + 1) * n] if sampled else [greedy_out[i]]
                predictions.append(_prediction(start + i, ex, greedy_out[i], samples))
            if not per_row:
                advance(len(batch))
    return predictions


def score_predictions(predictions: list[dict], reward_fn: Optional[Callable[[str, str], float]],
                      reward_pool=None, answer_fn=None, examples: Optional[Sequence[Example]] = None) -> None:
    """Fill rewards, voting answers and counts in place: one batch through the verifier.

    A custom reward (`takes_example`) is given each prediction's example as a dict
    (`examples[p["index"]].as_dict()`, or what the prediction holds when `examples` is None)."""
    if reward_fn is None and reward_pool is None:
        raise ValueError("score_predictions needs reward_fn or reward_pool")
    takes_example = (reward_pool.spec.custom if reward_pool is not None
                     else getattr(reward_fn, "takes_example", False))

    def target(p: dict):
        if not takes_example:
            return p["reference"]
        if examples is not None:
            return examples[p["index"]].as_dict()
        return {k: p[k] for k in ("id", "prompt", "reference")}
    # Verifiers are deterministic: score each distinct (completion, example) once. Under
    # greedy decoding the only sample is the greedy completion, so this halves the work. An
    # episode its environment rewarded is not the verifier's to score (envs/protocol.py).
    unique: dict[tuple, int] = {}
    args: list[tuple] = []
    for p in predictions:
        for text, env_reward in _texts(p):
            key = (text, p["index"] if takes_example else p["reference"])
            if env_reward is None and key not in unique:
                unique[key] = len(unique)
                args.append((text, target(p)))
    if not args:
        scores = []
    elif reward_pool is not None:
        scores = reward_pool.score([t for t, _ in args], [r for _, r in args])
    else:
        scores = [float(reward_fn(t, r)) for t, r in args]
    for p in predictions:
        ref = p["index"] if takes_example else p["reference"]
        rewards = [env_reward if env_reward is not None else scores[unique[(text, ref)]]
                   for text, env_reward in _texts(p)]
        p["greedy_reward"], p["rewards"] = rewards[0], rewards[1:]
        extract = answer_fn or answer_fn_for(p["source"])
        p["answers"] = [extract(t) for t in p["completions"]]
        p["num_correct"] = sum(is_correct(r) for r in p["rewards"])


def reference_predictions(examples: Sequence[Example]) -> list[dict]:
    """`policy=reference`: each example's own solution (the SFT target) as its only sample."""
    out = []
    for i, ex in enumerate(examples):
        text = render_target(ex)
        out.append({"index": i, "id": ex.id, "source": ex.source, "prompt": ex.prompt,
                    "reference": ex.reference, "greedy_completion": text,
                    "greedy_finish_reason": "stop", "completions": [text],
                    "finish_reasons": ["stop"], "num_tokens": [0]})
    return out


def merge_results(rank_predictions: Sequence[list[dict]]) -> EvalResult:
    """One result from every rank's scored predictions, back in data order."""
    merged = sorted((p for preds in rank_predictions for p in preds), key=lambda p: p["index"])
    return EvalResult(summarize(merged), merged)


def _samples(engine, episodes, examples, prompts, params: SamplingParams, seed: int, **per_row) -> list[dict]:
    """One sample dict per prompt (`EvalEpisodes.run`'s keys; without an environment `text`,
    `finish_reason` and `num_tokens` only)."""
    if episodes is not None:
        return episodes.run(engine, examples, prompts, params, seed, **per_row)
    return [{"text": c.text, "finish_reason": c.finish_reason, "num_tokens": len(c.token_ids)}
            for c in engine.generate(prompts, params, seed=seed, **per_row)]


def _prediction(index: int, ex: Example, greedy: dict, samples: list[dict]) -> dict:
    p = {"index": index, "id": ex.id, "source": ex.source, "prompt": ex.prompt,
         "reference": ex.reference, "greedy_completion": greedy["text"],
         "greedy_finish_reason": greedy["finish_reason"],
         "completions": [c["text"] for c in samples],
         "finish_reasons": [c["finish_reason"] for c in samples],
         "num_tokens": [c["num_tokens"] for c in samples]}
    if "episode" in greedy:
        p.update(greedy_episode=greedy["episode"], greedy_env_reward=greedy["reward"],
                 episodes=[c["episode"] for c in samples], env_rewards=[c["reward"] for c in samples],
                 **{k: [c[k] for c in samples] for k in EPISODE_COUNTS})
    return p


def _texts(p: dict) -> list[tuple]:
    """(text, environment reward or None) of the greedy sample, then of every sample."""
    env = [p.get("greedy_env_reward"), *p.get("env_rewards", [None] * len(p["completions"]))]
    return list(zip([p["greedy_completion"], *p["completions"]], env))


def _prompt_ids(ex: Example, template: "PromptFormat | str", tokenizer, engine) -> list[int]:
    ids = encode_prompt(ex, template, tokenizer)
    limit = getattr(engine, "max_seq_len", None)
    if not ids:
        raise ValueError(f"example {ex.id}: the rendered prompt is empty")
    if limit is not None and len(ids) >= limit:
        raise ValueError(f"example {ex.id}: prompt has {len(ids)} tokens but the model's "
                         f"max_seq_len is {limit}; no room to generate")
    return ids


def _check_args(n_samples: int, temperature: float, batch_size: int, rank: int, world_size: int):
    check_eval_sampling(n_samples, temperature, prefix="")  # the config's rule (a ValueError)
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")


class _progress_bar:
    """A rich progress bar over examples, a no-op, or a callback `(done, total)` (the trainer
    publishes its held-out eval's progress to the live view that way); `with ... as advance`."""

    def __init__(self, enabled, total: int):
        self.enabled, self.total, self._progress = enabled, total, None

    def __enter__(self):
        if callable(self.enabled):
            done = [0]
            self.enabled(0, self.total)

            def advance(n: int) -> None:
                done[0] += n
                self.enabled(done[0], self.total)
            return advance
        if not self.enabled:
            return lambda n: None
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)
        self._progress = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TimeRemainingColumn())
        self._progress.start()
        task = self._progress.add_task("eval", total=self.total)
        return lambda n: self._progress.advance(task, n)

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
