"""What to sample (`SamplingParams`) and what comes back (`Completion`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy. `ignore_eos` (benchmarks only) never stops at EOS."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_strings: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_p: float = 0.0               # keep tokens of at least min_p x the best one's probability; 0 = off
    repetition_penalty: float = 1.0  # CTRL's penalty on the prompt's and completion's tokens; 1 = off

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1), got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"SamplingParams.repetition_penalty must be > 0, got {self.repetition_penalty}")
        if any(not s for s in self.stop_strings):
            raise ValueError("SamplingParams.stop_strings must not contain an empty string")
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        object.__setattr__(self, "stop_token_ids", tuple(int(i) for i in self.stop_token_ids))


def stop_ids(tokenizer, params: SamplingParams | None = None) -> tuple[int, ...]:
    """The one stop-id rule (sorted): the tokenizer's stop ids (`eos_ids`: its EOS plus
    generation_config.json's, models/tokenizer.py), none under `params.ignore_eos`, plus
    `params.stop_token_ids`. The engine stops on these, the sharded eval too, and the
    trainer's overlong filter reads a completion ending on one as finished, not cut."""
    eos = () if params is not None and params.ignore_eos else getattr(tokenizer, "eos_ids", (tokenizer.eos_id,))
    extra = params.stop_token_ids if params is not None else ()
    return tuple(sorted({int(i) for i in (*eos, *extra) if i is not None}))


@dataclass
class Completion:
    """One sampled continuation. `logprobs[i]` is the log-prob of `token_ids[i]` under the
    distribution it was drawn from (`sampling.sampling_logprobs`: repetition penalty,
    temperature, min-p, top-k, top-p, renormalised); greedy completions report log
    softmax(logits) at T = 1."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS, stop token or stop string) | "length"
    text: str


@dataclass
class Finished:
    """One sequence as the engine hands it over, tensors on the engine's device.

    `policy_versions` = (first, last): the policy versions it was decoded under (they differ
    when weights were swapped between decode steps while it ran); `token_versions[i]` is the
    version token i was sampled under."""

    index: int                 # position in the prompt list
    token_ids: torch.Tensor    # [n] int64
    logprobs: torch.Tensor     # [n] float32, log-prob of each token as it was sampled
    finish_reason: str         # "stop" | "length"
    policy_versions: tuple[int, int] = (0, 0)
    token_versions: Optional[torch.Tensor] = None  # [n] int64
    # A multi-turn episode (envs/episode.py) hands over its whole completion the same way: the
    # model's tokens as sampled and the environment's between its turns.
    model_mask: Optional[torch.Tensor] = None  # [n] 1 where token i is the model's (None: all are)
    reward: Optional[float] = None             # its environment's reward (None: the reward role scores it)
    episode: Optional[dict] = None             # its counts: turns, tool_calls, tool_errors, truncated, env_ms
    prompt_ids: Optional[torch.Tensor] = None  # [p] its opening, when it is not the row's prompt
