"""One multi-turn episode, from the sampler to the trainer: the opening prompt, then segments
appended in order, each the model's tokens (as sampled, with their behaviour log-probs) or the
environment's (from envs/chat.py's `ChatDelta.after_turn`).

    prompt | model turn 1 | env delta 1 | model turn 2 | env delta 2 | ... | model turn n
           '------------------------- completion ------------------------------------'
    model_mask   1 1 1 1       0 0 0 0       1 1 1 ...
    logprobs     sampled      0.0 ...       sampled

The loss trains on model tokens only (`model_mask`); behaviour log-probs exist only for them
(0.0 at environment tokens, never read under the mask). Plain Python lists, not tensors: the
episode grows a turn at a time (one `.tolist()` of a turn's sampled ids, one `encode` of a
delta), and the generator copies `completion`, `model_mask` and `logprobs` once into its packed
tensor rows; a tensor per segment would be concatenated again on every append.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass(frozen=True)
class Segment:
    ids: list[int]
    model: bool                               # sampled by the model (trained on) or the environment's
    logprobs: Optional[list[float]] = None    # behaviour log-probs, model segments only
    version: Optional[int] = None             # oldest policy version the turn was decoded under


@dataclass
class Episode:
    prompt: list[int]
    segments: list[Segment] = field(default_factory=list)

    def add_model(self, ids: list[int], logprobs: list[float],
                  versions: Union[int, list[int], None] = None) -> None:
        """A model turn: `ids` exactly as sampled, one behaviour log-prob each; `versions` the
        policy version it was decoded under (an int, or one per token: weights may change
        mid-turn), kept as the oldest, as a rollout row keeps it (wire/rollout.py)."""
        ids, logprobs = [int(i) for i in ids], [float(x) for x in logprobs]
        if len(ids) != len(logprobs):
            raise ValueError(f"a model turn of {len(ids)} tokens has {len(logprobs)} log-probs")
        if isinstance(versions, (list, tuple)):
            if len(versions) != len(ids):
                raise ValueError(f"a model turn of {len(ids)} tokens has {len(versions)} versions")
            versions = min(versions) if versions else None
        self.segments.append(Segment(ids, True, logprobs, versions))

    def add_env(self, ids: list[int]) -> None:
        """Environment tokens (end-of-turn closing a cut turn, separator, messages, generation prompt)."""
        self.segments.append(Segment([int(i) for i in ids], False))

    @property
    def completion(self) -> list[int]:
        return [i for s in self.segments for i in s.ids]

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.completion

    @property
    def model_mask(self) -> list[int]:
        return [int(s.model) for s in self.segments for _ in s.ids]

    @property
    def logprobs(self) -> list[float]:
        return [x for s in self.segments for x in (s.logprobs if s.model else [0.0] * len(s.ids))]

    @property
    def turns(self) -> list[Segment]:
        return [s for s in self.segments if s.model]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + sum(len(s.ids) for s in self.segments)

    @property
    def policy_version(self) -> Optional[int]:
        """The oldest version over the model turns that gave one (None: none did)."""
        versions = [s.version for s in self.turns if s.version is not None]
        return min(versions) if versions else None

    def render(self, tokenizer) -> str:
        """The whole episode as text for reading (`llamarl data`): the prompt and model turns as
        `tokenizer.decode` writes them, each environment span as `⟦env: ...⟧`."""
        return tokenizer.decode(self.prompt) + "".join(
            tokenizer.decode(s.ids) if s.model else f"⟦env: {tokenizer.decode(s.ids)}⟧" for s in self.segments)


__all__ = ["Episode", "Segment"]
