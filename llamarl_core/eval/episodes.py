"""Episodes over a fixed list of rows: what training's chunks and evaluation share.

    rows (prompt ids, one per sample) ──▶ `stream_episodes`: the engine's `stream` with a refill
        that hands the rows out as slots free up, through an EpisodeRunner (envs/runner.py)
    each row ends once, as one `Finished`: the opening, every turn and the environment's tokens
    between them, its mask, its environment's reward (None: the verifier scores its last turn)

`ChunkGenerator.generate` (executors/chunks.py) streams a chunk's rows this way; `evaluate`
(eval/evaluate.py) streams an eval batch's rows through `EvalEpisodes`, which owns the
environment's workers for as long as its owner evaluates (`llamarl eval`: one run; the
trainer: its whole life, one held-out eval after another), and closes them.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from llamarl_core.config.schema import EnvConfig
from llamarl_core.data import Example, PromptFormat
from llamarl_core.data.templates import prompt_messages
from llamarl_core.envs.episode import Episode
from llamarl_core.generation import Finished, SamplingParams
from llamarl_core.generation.stops import first_stop


def episode_example(example: Example, fmt: PromptFormat) -> dict:
    """What an environment's `reset` receives: the row as a dict and the opening llamarl would use."""
    return {**example.as_dict(), "messages": prompt_messages(example, fmt)}


def stream_episodes(engine, runner, prompts: Sequence[list[int]], params: SamplingParams, seed: int,
                    on_finish: Callable[[Finished], None], **stream_kwargs) -> None:
    """Run one episode per row of `prompts` (row i is `runner`'s i-th) on `engine.stream`; each
    ends once, in any order, through `on_finish` with `index` = its row."""
    rows = iter(prompts)
    refill, finish = runner.hooks(lambda free: [p for _, p in zip(range(free), rows)], on_finish)
    try:
        engine.stream([], params, seed=seed, on_finish=finish, refill=refill, **stream_kwargs)
    finally:
        runner.close()  # an exception mid-stream leaves no episode open in the workers


def episode_of(done: Finished) -> Episode:
    """The episode a `Finished` row holds."""
    return episode_from(done.prompt_ids.tolist(), done.token_ids.tolist(), done.model_mask.tolist(),
                        done.logprobs.tolist())


def episode_from(prompt: list[int], ids: list[int], mask: list, logprobs: Optional[list[float]] = None) -> Episode:
    """An episode from a row's prompt, completion and per-token model mask (a rollout row's
    `loss_mask` over its completion), its segments cut where the mask changes."""
    ep = Episode(list(prompt))
    logprobs = logprobs if logprobs is not None else [0.0] * len(ids)
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            if mask[start]:
                ep.add_model(ids[start:i], logprobs[start:i])
            else:
                ep.add_env(ids[start:i])
            start = i
    return ep


class EvalEpisodes:
    """An environment's workers for evaluation: opened once, closed by `close` (or `with`)."""

    def __init__(self, env: EnvConfig, tokenizer, fmt: PromptFormat, max_prompt_tokens: int):
        from llamarl_core.envs.runner import open_episodes  # starts the worker processes
        self.env, self.tokenizer, self.fmt, self.max_prompt_tokens = env, tokenizer, fmt, max_prompt_tokens
        self.pool, self.delta = open_episodes(env, tokenizer, fmt.chat_template_kwargs)

    def run(self, engine, examples: Sequence[Example], prompts: Sequence[list[int]], params: SamplingParams,
            seed: int, on_finish: Optional[Callable[[Finished], None]] = None) -> list[dict]:
        """One episode per example (`prompts[i]`: its single-turn prompt, the row's prompt when its
        reset fails), in order, as a dict: `text` (the last model turn, cut at the
        first stop string as a single-turn completion is: what the verifier scores), `episode`
        (the whole episode, `Episode.render`), `reward` (its environment's, None: unscored),
        `finish_reason`, `num_tokens` (the model's), `turns`, `tool_calls`, `tool_errors`, `truncated`."""
        from llamarl_core.envs.runner import EpisodeRunner
        fmt = self.fmt
        runner = EpisodeRunner(self.pool, self.delta, self.tokenizer, self.env, self.max_prompt_tokens,
                               params.max_new_tokens, lambda i: episode_example(examples[i], fmt), Finished)
        out: list[Optional[dict]] = [None] * len(examples)

        def collect(done: Finished) -> None:
            out[done.index] = self._sample(done, params)
            if on_finish is not None:
                on_finish(done)
        stream_episodes(engine, runner, prompts, params, seed, collect)
        return out  # type: ignore[return-value]

    def _sample(self, done: Finished, params: SamplingParams) -> dict:
        ep = episode_of(done)
        last = ep.turns[-1].ids if ep.turns else []
        text = self.tokenizer.decode(last)
        hit = first_stop(text, params.stop_strings) if params.stop_strings else None
        counts = done.episode or {}
        return {"text": text if hit is None else text[:hit[0]], "episode": ep.render(self.tokenizer),
                "reward": done.reward, "finish_reason": done.finish_reason,
                "num_tokens": sum(len(s.ids) for s in ep.turns),
                **{k: int(counts.get(k, 0)) for k in ("turns", "tool_calls", "tool_errors", "truncated")}}

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> "EvalEpisodes":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["EvalEpisodes", "episode_example", "episode_from", "episode_of", "stream_episodes"]
