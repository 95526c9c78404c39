"""Episodes through the engine: each row a caller starts becomes a multi-turn episode.

    caller's refill ──▶ a new row ──▶ pool.reset(example)  (an environment worker, async)
    reset reply ──▶ the opening's ids (ChatDelta.opening) ──▶ the engine (a prompt, its cap)
    a turn ends ──▶ its tokens appended as sampled ──▶ pool.step(its text)   (async)
    step reply ──▶ done, or the environment's tokens appended (ChatDelta.after_turn, masked)
                   ──▶ the episode's next turn waits for a free slot like any prompt
    done / truncated / failed ──▶ one `Finished` (the whole completion, its mask) to the caller

`hooks(refill, on_finish)` wraps a caller's `engine.stream` hooks: the caller hands rows out
and gets each back once, finished (executors/chunks.py writes it into its rows). Without an
environment (`pool` None) an episode is the one-turn case of the same path: the row's own
prompt, one turn, the engine's `Finished` handed back as it is (its index the caller's). While an episode waits on its environment the engine decodes the
others (continuous batching); the refill blocks only when no row decodes and nothing is ready.

Token-in-token-out: the model's tokens go into the episode exactly as sampled, with their
log μ and the version that sampled each (a weight swap mid-episode changes them per token);
the environment's tokens are appended as the template renders them (envs/chat.py) and masked
out of the loss. An episode ends when its environment says done; it is truncated when a turn
hits its length cap, after `env.max_turns` turns, or when the next turn would not fit
`env.max_episode_tokens`; it fails (reward 0, nothing trained: mask 0) when its environment
raised, timed out or died (envs/pool.py counts those).
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from llamarl_core.envs.chat import ChatDelta
from llamarl_core.envs.episode import Episode
from llamarl_core.envs.pool import EnvPool, EnvSpec

WAIT_SLICE_S = 0.05  # how long a refill with nothing to decode waits on the pool at a time


def open_episodes(env, tokenizer, template_kwargs=None) -> tuple[EnvPool, ChatDelta]:
    """The environment workers of `env` (an EnvConfig) and the chat delta over their tools (the
    tools' schemas come from a worker: their module is never imported here)."""
    pool = EnvPool(EnvSpec(env.entry, env.tools, env.tool_parser, env.max_message_chars),
                   workers=env.workers, step_timeout_s=env.step_timeout_s)
    return pool, ChatDelta(tokenizer, dict(template_kwargs or {}), tools=pool.tools or None,
                           tool_parser=env.tool_parser)


@dataclass
class _State:
    example: dict                       # what reset received
    fallback: list[int]                 # the row's own prompt (a failed reset leaves it as the prompt)
    episode: Optional[Episode] = None
    last: Optional[list[int]] = None    # the last turn's tokens as sampled
    versions: list[int] = field(default_factory=list)  # per model token
    rewards: list[float] = field(default_factory=list)
    counts: dict = field(default_factory=lambda: {"tool_calls": 0, "tool_errors": 0})
    env_s: float = 0.0


class EpisodeRunner:
    def __init__(self, pool, delta, tokenizer, env, max_prompt_tokens: int, max_new_tokens: int,
                 example_of: Callable[[int], dict], finished_cls, device=None, warned: Optional[set] = None):
        """`pool`: an EnvPool (None: no environment, one turn per row); `delta`: a ChatDelta over
        the pool's tools; `env`: the EnvConfig;
        `example_of(i)`: the example dict of the caller's i-th row (`Example.as_dict()` plus its
        opening `messages`); `finished_cls`: the engine's `Finished`; `warned`: the kinds of
        failure already printed (shared by a generator's runners: each is printed once)."""
        self.pool, self.delta, self.tokenizer, self.env = pool, delta, tokenizer, env
        self.max_prompt_tokens, self.max_new_tokens = max_prompt_tokens, max_new_tokens
        self.example_of, self.finished_cls, self.device = example_of, finished_cls, device
        self.states: dict[int, _State] = {}    # caller's row index → its episode
        self.ready: deque[int] = deque()       # rows whose next turn may start
        self.turn_of: dict[int, int] = {}      # engine prompt index → caller's row index
        self.rows_started = 0                  # rows the caller handed out
        self.turns_started = 0                 # prompts handed to the engine
        self.warned: set[str] = set() if warned is None else warned
        self.waited_s = 0.0                    # seconds the refill blocked with nothing to decode

    @property
    def waiting(self) -> int:
        """Episodes waiting on their environment (a reset or step sent, no reply yet)."""
        return 0 if self.pool is None else self.pool.pending

    def hooks(self, refill: Callable[[int], list], on_finish: Callable) -> tuple[Callable, Callable]:
        """The engine's `refill` and `on_finish` for a caller's."""
        self.caller_on_finish = on_finish

        def engine_refill(free: int) -> list:
            if self.pool is not None:
                self._replies(0.0)
            if len(self.ready) < free:
                for prompt in refill(free - len(self.ready)):
                    self._start(prompt)
            if not self.ready and not self.turn_of and self.waiting:  # nothing decodes: wait
                t0 = time.perf_counter()
                while not self.ready and not self.turn_of and self.waiting:
                    self._replies(WAIT_SLICE_S)
                self.waited_s += time.perf_counter() - t0
            out = []  # every ready turn, beyond `free` too: the engine queues them (a group's
            while self.ready:  # later members are known when its first is prefilled: prefill_once.py)
                row = self.ready.popleft()
                self.turn_of[self.turns_started] = row
                self.turns_started += 1
                out.append(self._next_turn(row))
            return out

        return engine_refill, self._turn_done

    # ---- the caller's rows -------------------------------------------------------------
    def _start(self, prompt: list[int]) -> None:
        row = self.rows_started
        self.rows_started += 1
        if self.pool is None:  # the one-turn case: the row's prompt is the turn's
            self.states[row] = _State({}, prompt)
            self.ready.append(row)
            return
        example = self.example_of(row)
        self.states[row] = _State(example, list(prompt))
        self.pool.reset(row, example)

    def _next_turn(self, row: int):
        """The next turn's prompt: an episode's (its ids so far, its cap), or a row's own prompt."""
        if self.pool is None:
            return self.states[row].fallback
        ep = self.states[row].episode
        used = len(ep.completion)
        return list(ep.ids), min(self.max_new_tokens, self.env.max_episode_tokens - used)

    # ---- replies -----------------------------------------------------------------------
    def _replies(self, timeout_s: float) -> None:
        for reply in self.pool.poll(timeout_s):
            st = self.states.get(reply.episode)
            if st is None:
                continue
            st.env_s += reply.seconds
            for k in st.counts:
                st.counts[k] += int(reply.counts.get(k, 0))
            if reply.reward is not None:
                st.rewards.append(float(reply.reward))
            if reply.failed:
                self._warn("env", f"an environment failed (its episode scores 0, not trained): {reply.error}")
                self._end(reply.episode, failed=True)
            elif reply.kind == "reset":
                self._opened(reply.episode, reply.messages)
            elif reply.done:
                self._end(reply.episode)
            elif len(st.episode.turns) >= self.env.max_turns:
                self._end(reply.episode, truncated=True)
            else:
                self._answered(reply.episode, reply.messages)

    def _opened(self, row: int, messages: list[dict]) -> None:
        st = self.states[row]
        ids = self.delta.opening(messages)
        if len(ids) > self.max_prompt_tokens:  # the run's mistake, not an episode's: stop, say which key
            raise ValueError(f"generation.max_prompt_tokens={self.max_prompt_tokens}: an episode's opening has "
                             f"{len(ids)} tokens (example {st.example.get('id')}; the tools' descriptions count): "
                             f"raise generation.max_prompt_tokens")
        st.episode = Episode(ids)
        self.ready.append(row)

    def _answered(self, row: int, messages: list[dict]) -> None:
        st = self.states[row]
        ids = self.delta.after_turn(st.last, messages)
        if len(st.episode.completion) + len(ids) >= self.env.max_episode_tokens:
            self._end(row, truncated=True)  # no room for the environment's answer and a turn after it
            return
        st.episode.add_env(ids)
        self.ready.append(row)

    # ---- the engine's turns ------------------------------------------------------------
    def _turn_done(self, done) -> None:
        row = self.turn_of.pop(done.index)
        if self.pool is None:  # one turn: the engine's sample as it is (tensors untouched)
            self.states.pop(row)
            self.caller_on_finish(dataclasses.replace(done, index=row))
            return
        st = self.states[row]
        ids = done.token_ids.tolist()
        versions = (done.token_versions.tolist() if done.token_versions is not None
                    else [done.policy_versions[0]] * len(ids))
        st.episode.add_model(ids, done.logprobs.tolist(), versions)
        st.last = ids
        st.versions += versions
        if done.finish_reason == "length":  # cut: no end-of-turn for the environment to answer
            self._end(row, truncated=True)
            return
        self.pool.step(row, self.tokenizer.decode(ids))

    def _end(self, row: int, truncated: bool = False, failed: bool = False) -> None:
        st = self.states.pop(row)
        self.pool.close_episode(row)
        ep = st.episode
        prompt = ep.prompt if ep is not None else st.fallback
        completion = ep.completion if ep is not None else []
        mask = ep.model_mask if ep is not None and not failed else [0] * len(completion)
        logprobs = ep.logprobs if ep is not None else []
        first = st.versions[0] if st.versions else 0
        tensor = lambda x, dtype: torch.tensor(x, dtype=dtype, device=self.device)  # noqa: E731
        turns = len(ep.turns) if ep is not None else 0
        self.caller_on_finish(self.finished_cls(
            index=row, token_ids=tensor(completion, torch.long), logprobs=tensor(logprobs, torch.float32),
            finish_reason="length" if truncated or failed else "stop",
            policy_versions=(first, st.versions[-1] if st.versions else first),
            model_mask=tensor(mask, torch.float32),
            reward=0.0 if failed else (sum(st.rewards) if st.rewards else None),
            episode={"turns": turns, **st.counts, "truncated": int(truncated), "failed": int(failed),
                     "env_ms": int(round(st.env_s * 1000))},
            prompt_ids=tensor(prompt, torch.long)))

    def close(self) -> None:
        """Forget every episode still open (a stream cut by a restart or the run's end): their
        environments are closed in the workers; nothing is handed to the caller."""
        for row in list(self.states) if self.pool is not None else ():
            self.pool.close_episode(row)
        self.states.clear()
        self.ready.clear()
        self.turn_of.clear()

    def _warn(self, kind: str, line: str) -> None:
        if kind not in self.warned:  # once per kind in this rank's log; the metrics count them all
            self.warned.add(kind)
            print(f"env: {line}", flush=True)
