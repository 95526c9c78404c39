"""Generate one rollout chunk: this replica's share of a step's prompts, group_size each.

Shared by the async generator role and the synchronous colocated actor, so both sample
exactly the same prompts for chunk n with the same seeds. The engine's finished samples
(tensors) are written straight into the chunk's rollout tensors; a prompt group is handed
over (`on_group`) as soon as its last sample ends.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from llamarl_core.config.layout import row_tokens
from llamarl_core.config.schema import EnvConfig, GenerationConfig
from llamarl_core.data.templates import PromptFormat
from llamarl_core.envs.runner import EpisodeRunner, open_episodes
from llamarl_core.eval.episodes import episode_example, stream_episodes
from llamarl_core.wire.rollout import EPISODE_FIELDS, FLOAT_FIELDS, INT_FIELDS, Rollout, columns
from llamarl_core.executors.routing import prompt_range
from llamarl_core.executors.setup import PromptSet, chunk_prompt_indices
from llamarl_core.plan.validate import check_lengths_fit
from llamarl_core.generation import Finished, GenerationEngine, SamplingParams


@dataclass(frozen=True)
class ChunkConfig:
    """What chunk generation reads of the run (built by executors/pipeline.py: `chunk_config`)."""

    generation: GenerationConfig  # sampling and lengths
    max_batch_size: int           # resources.generator.max_batch_size: sequences decoded together
    prompts_per_step: int         # algorithm.prompts_per_step (all replicas together)
    group_size: int               # algorithm.group_size: samples per prompt
    seed: int                     # run.seed: which prompts make chunk n, and the sampling seeds
    env: EnvConfig = field(default_factory=EnvConfig)  # multi-turn episodes (envs/), when enabled
    prompt_format: PromptFormat = field(default_factory=PromptFormat)  # an episode's opening messages


class ChunkGenerator:
    def __init__(self, cfg: ChunkConfig, model, tokenizer, prompts: PromptSet,
                 replica: int, num_replicas: int, quantization: str = "none", token_sync=None):
        gen = cfg.generation
        self.cfg, self.tokenizer, self.prompts = cfg, tokenizer, prompts
        self.replica, self.num_replicas = replica, num_replicas
        # the plan's rule (it refuses this first); here for callers that build chunks without a plan
        check_lengths_fit(gen, model.args.max_seq_len, "the generator's model", "model.args.max_seq_len")
        self.engine = GenerationEngine(model, tokenizer, max_batch_size=cfg.max_batch_size,
                                       max_seq_len=row_length(cfg) + 1,
                                       quantization=quantization, batching=gen.batching,
                                       token_sync=token_sync)
        self.params = SamplingParams(max_new_tokens=gen.max_new_tokens, temperature=gen.temperature,
                                     top_p=gen.top_p, top_k=gen.top_k, min_p=gen.min_p,
                                     repetition_penalty=gen.repetition_penalty,
                                     stop_strings=tuple(gen.stop_strings))
        self.tokens_generated = 0
        self._episodes = None  # (EnvPool, ChatDelta) once the first episode starts (env.enabled)
        self._warned: set[str] = set()  # environment failures already printed

    def episode_runner(self, row_example: Callable[[int], int]) -> EpisodeRunner:
        """The EpisodeRunner over the rows a stream starts: episodes of this run's environment,
        or (none) the one-turn case; `row_example(i)` is the example index of the i-th row."""
        env = self.cfg.env
        if env.enabled and self._episodes is None:  # workers start once, on first use, until close()
            self._episodes = open_episodes(env, self.tokenizer, self.cfg.prompt_format.chat_template_kwargs)
        pool, delta = self._episodes if env.enabled else (None, None)
        fmt, examples = self.cfg.prompt_format, self.prompts.examples
        return EpisodeRunner(pool, delta, self.tokenizer, env, self.cfg.generation.max_prompt_tokens,
                             self.params.max_new_tokens, lambda i: episode_example(examples[row_example(i)], fmt),
                             Finished, device=self.engine.device, warned=self._warned)

    def close(self) -> None:
        """Stop the environment workers (if any)."""
        if self._episodes is not None:
            self._episodes[0].close()
            self._episodes = None

    def stats(self, since: float) -> dict:
        """Tokens generated so far and their rate since `since` (unix seconds)."""
        return {"tokens": self.tokens_generated,
                "tokens_per_s": self.tokens_generated / max(1e-9, time.time() - since)}

    def generate(self, chunk: int, policy_version: int,
                 on_group: Optional[Callable[[Rollout], None]] = None,
                 between_steps: Optional[Callable[[], Optional[int]]] = None) -> Rollout:
        """Chunk `chunk` as one Rollout; each prompt group also goes to `on_group` the moment
        its last sample ends (continuous batching ends groups out of order)."""
        a = self.cfg
        indices = chunk_prompt_indices(len(self.prompts), chunk, a.prompts_per_step, a.seed)
        lo, hi = prompt_range(self.replica, self.num_replicas, a.prompts_per_step)
        example_ids = [i for i in indices[lo:hi] for _ in range(a.group_size)]
        prompt_ids = [self.prompts.prompt_ids[i] for i in example_ids]
        seed = (a.seed * 1_000_003 + chunk * 1009 + self.replica) % (2**62)
        groups = _Groups(self, chunk, example_ids, prompt_ids, policy_version, on_group)
        runner = self.episode_runner(lambda i: example_ids[i])
        # each row an episode as a slot frees up (the path eval shares; one turn without an environment)
        stream_episodes(self.engine, runner, prompt_ids, self.params, seed, groups.add,
                        between_steps=between_steps, policy_version=policy_version)
        return groups.whole()


class _Groups:
    """Collects finished samples into prompt groups; builds each group's rows as tensors."""

    def __init__(self, owner: ChunkGenerator, chunk: int, example_ids: list[int],
                 prompt_ids: list[list[int]], policy_version: int, on_group):
        n = len(example_ids)
        self.owner, self.chunk, self.on_group = owner, chunk, on_group
        self.size = owner.cfg.group_size
        self.prompt_ids = prompt_ids
        # Each sample is written once, straight into the wire's packed layout (wire/rollout.py:
        # ints [n, L + 4], floats [n, L]) where the engine made it: no per-sample copy to the host,
        # and a finished group leaves as views of its rows, never packed again (the rollout
        # sender's thread takes it to the host, AsyncSender). Prompts are tensors once per run
        # (PromptSet.table). Versions stay host numbers too, for the group's header.
        device = owner.engine.device
        table, lengths = owner.prompts.table(owner.tokenizer.pad_id)
        rows = torch.tensor(example_ids, dtype=torch.long)
        self.length = row_length(owner.cfg)
        self.example_ids = example_ids
        ints = torch.full((n, self.length + len(INT_FIELDS) - 1), owner.tokenizer.pad_id, dtype=torch.long)
        ints[:, :table.shape[1]] = table[rows]
        for name, value in (("prompt_lens", lengths[rows]), ("completion_lens", 0), ("example_ids", rows),
                            ("policy_versions", policy_version), ("turns", 1)):
            columns(ints, self.length, INT_FIELDS)[name][:] = value
        self.ints = ints.to(device)
        self.floats = torch.zeros(n, Rollout.packed_widths(torch.tensor([n, self.length, self.length - 1]))[1],
                                  device=device)
        self.row = columns(self.ints, self.length, INT_FIELDS)  # the int fields' views, by name
        self.float_row = columns(self.floats, self.length - 1, FLOAT_FIELDS)
        self.float_row["rewards"][:] = float("nan")  # unscored: the reward role scores it (executors/reward.py)
        self.tokens = self.row["tokens"]
        self.versions = [policy_version] * n
        self.left = [self.size] * (n // self.size)  # samples still running per group

    def add(self, done: Finished) -> None:
        r, c, p = done.index, done.token_ids.numel(), len(self.prompt_ids[done.index])
        if done.prompt_ids is not None:  # an episode opened by its environment (envs/runner.py)
            p = done.prompt_ids.numel()
            self.tokens[r, :p] = done.prompt_ids
            self.tokens[r, p:] = self.owner.tokenizer.pad_id
            self.row["prompt_lens"][r] = p
        self.tokens[r, p:p + c] = done.token_ids
        # log mu and the loss mask where the loss reads them: column t is token t+1's (next-token
        # targets), so the trainer slices these rows and never moves them again (train_step.py)
        f = self.float_row
        f["behavior_logprobs"][r, p - 1:p - 1 + c] = done.logprobs
        f["loss_mask"][r, p - 1:p - 1 + c] = 1.0 if done.model_mask is None else done.model_mask
        if done.reward is not None:
            f["rewards"][r] = done.reward
        for name, value in (done.episode or {}).items():
            if name in EPISODE_FIELDS:
                self.row[name][r] = value
        self.versions[r] = done.policy_versions[0]
        self.row["completion_lens"][r], self.row["policy_versions"][r] = c, self.versions[r]
        self.owner.tokens_generated += c
        g = r // self.size
        self.left[g] -= 1
        if self.left[g] == 0 and self.on_group is not None:
            self.on_group(self._rows(g * self.size, (g + 1) * self.size, group=g,
                                     chunk_groups=len(self.left)))

    def _rows(self, lo: int, hi: int, group: int = 0, chunk_groups: int = 0) -> Rollout:
        header = torch.tensor([hi - lo, self.length, self.length - 1, min(self.versions[lo:hi]), self.owner.replica,
                               self.chunk, group, chunk_groups])
        return Rollout.over_packed(header, self.ints[lo:hi], self.floats[lo:hi])

    def whole(self) -> Rollout:
        return self._rows(0, len(self.versions))


def row_length(cfg: ChunkConfig) -> int:
    """Tokens a rollout row holds (config/layout.py: row_tokens)."""
    return row_tokens(cfg.generation, cfg.env)
