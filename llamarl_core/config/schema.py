"""The config schema: dataclasses registered in Hydra's ConfigStore; recipes only override.

One source of defaults (here). Loading ends in `OmegaConf.to_object`, so an unknown key or a
wrong type stops the run before any process starts; `__post_init__` checks each field on its
own, and `llamarl_core.plan` checks what needs several sections at once (TP vs heads, device
counts, memory). Key names under `resources`, `algorithm` and `run` are a user contract.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

from llamarl_core.config.choices import (ADVANTAGE_MODES, KL_ESTIMATORS, KL_PLACEMENTS, MISMATCH_MODES, TOOL_PARSERS, AGGREGATIONS, DEVICE_TYPES, DTYPES, EXPORT_DTYPES, LOSS_KINDS,
                                         LR_SCHEDULES, OVERLONG_MODES, QUANTIZATIONS, STRATEGIES,
                                         WEIGHT_TRANSPORTS, BATCHING, BUILTIN_REWARDS, DATA_NAMES,
                                         PROMPT_TEMPLATES, WEIGHT_SLOTS, ON_ERROR_MODES, SOLUTION_STYLES,
                                         EVAL_POLICIES, SPLITS, GROUP_RELATIVE_ADVANTAGES, DUAL_CLIP_KINDS, LENGTH_NORMS,
                                         LORA_TARGETS, PEFT_TARGETS)
from llamarl_core.config.errors import ConfigError


def _check_choice(key: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(map(str, choices))}")


def _check_reward(value: str, key: str = "data.reward") -> None:
    """A built-in name, or `package.module:function` / `path/to/file.py:function`: the syntax only.
    Whether it imports is checked before launch in a subprocess (runtime/data_check.py), never here:
    a user's reward code runs only in reward workers."""
    if value in ("auto", *BUILTIN_REWARDS):
        return
    target, sep, attr = str(value).rpartition(":")
    is_module = all(part.isidentifier() for part in target.split("."))
    if not sep or not attr.isidentifier() or not target or not (target.endswith(".py") or is_module):
        raise ConfigError(f"{key}={value!r} is not one of auto, {', '.join(BUILTIN_REWARDS)}, "
                          f"package.module:function or path/to/file.py:function")


@dataclass
class RewardTerm:
    """One term of `data.rewards`: the training reward is sum_i weight_i * fn_i (docs/REWARDS.md)."""
    fn: str = "auto"                     # any value data.reward accepts (a built-in or module:function)
    weight: float = 1.0                  # its factor in the sum; 0 = logged only, not trained on
    name: Optional[str] = None           # its metric reward/<name>_mean; default the built-in's or
                                         # the function's name (a unique identifier)

    def label(self) -> str:
        """`name`, or what `fn` names: the built-in, or the function after the last ':'."""
        return self.name if self.name is not None else str(self.fn).rpartition(":")[2]


def _check_reward_terms(terms: list) -> None:
    """Each `data.rewards[i]`: a reward spec, a finite weight, a unique identifier for a name; and
    some weight not 0 (else every sample scores 0 and nothing is learned)."""
    seen: dict[str, int] = {}
    for i, term in enumerate(terms):
        if isinstance(term, dict):  # built in Python rather than loaded: the same checks
            term = RewardTerm(**term)
        _check_reward(term.fn, f"data.rewards[{i}].fn")
        if isinstance(term.weight, bool) or not isinstance(term.weight, (int, float)) or not math.isfinite(term.weight):
            raise ConfigError(f"data.rewards[{i}].weight={term.weight!r} must be a finite number")
        name = term.label()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"data.rewards[{i}].name={name!r} must be an identifier (letters, digits, _): "
                              f"it names the metric reward/<name>_mean")
        if name in seen:
            raise ConfigError(f"data.rewards[{i}].name={name!r} is already data.rewards[{seen[name]}]'s name: "
                              f"set a unique data.rewards[{i}].name")
        seen[name] = i
    if terms and not any(float(t["weight"] if isinstance(t, dict) else t.weight) != 0 for t in terms):
        raise ConfigError(f"data.rewards: every weight is 0 ({len(terms)} terms): every sample would score 0")


# apply_chat_template's own arguments, which llamarl sets (a prompt ends in the generation prompt, as text)
RESERVED_TEMPLATE_KWARGS = ("conversation", "add_generation_prompt", "tokenize", "chat_template",
                            "continue_final_message", "return_dict", "tools", "documents")


def _check_template_kwargs(value) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"data.chat_template_kwargs={value!r} must be a mapping, e.g. "
                          "'data.chat_template_kwargs={enable_thinking: false}'")
    taken = [k for k in value if not isinstance(k, str) or k in RESERVED_TEMPLATE_KWARGS]
    if taken:
        raise ConfigError(f"data.chat_template_kwargs: {taken[0]!r} is not a template variable llamarl "
                          f"passes on (it sets {', '.join(RESERVED_TEMPLATE_KWARGS[1:4])} itself)")


def _check_positive(key: str, value, minimum: int = 1) -> None:
    if value < minimum:
        raise ConfigError(f"{key}={value} must be >= {minimum}")


def _check_number(key: str, value: float, above: float | None = None, at_least: float | None = None) -> None:
    """A finite number > `above` (or >= `at_least`): NaN, inf and out-of-range values stop here."""
    ok = math.isfinite(value) and (above is None or value > above) and (at_least is None or value >= at_least)
    if not ok:
        bound = f"> {above:g}" if above is not None else f">= {at_least:g}"
        raise ConfigError(f"{key}={value} must be a finite number {bound}")


@dataclass
class LoraConfig:
    """LoRA RL (docs/LORA.md): the base weights frozen, low-rank adapters trained and synced.
    `rank` 0: full fine-tuning (every weight trained and synced)."""

    rank: int = 0                        # adapter rank r; 0 = off. "LoRA Without Regret": 16-64 for RL
    alpha: float = 32.0                  # scale alpha / rank on B @ A (PEFT's lora_alpha)
    dropout: float = 0.0                 # on the adapter's input, training only (PEFT's lora_dropout)
    target_modules: List[str] = field(default_factory=lambda: list(LORA_TARGETS))  # projections with adapters:
                                         # ours (wq wk wv wo w1 w2 w3) or PEFT's (q_proj ... down_proj,
                                         # all-linear); never the embedding or the output head
    init_from: Optional[str] = None      # a PEFT adapter directory (adapter_config.json,
                                         # adapter_model.safetensors) to start from

    def __post_init__(self):
        _check_positive("model.lora.rank", self.rank, 0)
        _check_number("model.lora.alpha", self.alpha, above=0)
        _check_number("model.lora.dropout", self.dropout, at_least=0)
        if self.dropout >= 1:
            raise ConfigError(f"model.lora.dropout={self.dropout} must be < 1")
        self.target_modules = lora_targets(self.target_modules)
        if self.init_from and not self.rank:
            raise ConfigError("model.lora.init_from is set but model.lora.rank=0 (LoRA off): set "
                              "model.lora.rank to the adapter's r")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        """What B @ A is multiplied by (PEFT's `scaling`, rsLoRA off)."""
        return self.alpha / self.rank


def lora_targets(names) -> list[str]:
    """`model.lora.target_modules` as our projection names, in our order (PEFT's names and
    `all-linear` accepted); one line naming the key for anything else."""
    names = [names] if isinstance(names, str) else list(names)
    out: set[str] = set()
    for n in names:
        if n == "all-linear":
            out.update(LORA_TARGETS)
        elif n in LORA_TARGETS or n in PEFT_TARGETS:
            out.add(PEFT_TARGETS.get(n, n))
        else:
            raise ConfigError(f"model.lora.target_modules: {n!r} is not one of {', '.join(LORA_TARGETS)} "
                              f"(or PEFT's {', '.join(PEFT_TARGETS)}, all-linear)")
    if not out:
        raise ConfigError("model.lora.target_modules is empty: name at least one projection")
    return [n for n in LORA_TARGETS if n in out]


@dataclass
class ModelConfig:
    preset: str = "tiny-2m"              # a name in llamarl_core.models.args.PRESETS
    checkpoint: Optional[str] = None     # HF-format directory; overrides preset sizes when set
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class GeneratorResources:
    num_devices: int = 1                 # generator ranks (devices) in all, over every replica
    tp: int = 1                          # tensor parallel size inside one replica
    pp: int = 1                          # pipeline stages inside one replica
    dp: int = 0                          # replicas; 0 = num_devices / (tp * pp)
    dtype: str = "float32"               # the generator's weights and compute
    quantization: str = "none"           # weight-only: int8 (CPU/GPU) or fp8 e4m3 (CUDA)
    max_batch_size: int = 64             # sequences decoded together per replica
    threads: int = 0                     # torch threads per rank on CPU; 0 = planned
    weight_slots: int = 2                # DDMA weight copies: 2 = decode on while the next lands; 1 = pause

    def __post_init__(self):
        for k in ("num_devices", "tp", "pp", "max_batch_size"):
            _check_positive(f"resources.generator.{k}", getattr(self, k))
        _check_positive("resources.generator.dp", self.dp, 0)
        _check_positive("resources.generator.threads", self.threads, 0)
        _check_choice("resources.generator.dtype", self.dtype, DTYPES)
        _check_choice("resources.generator.quantization", self.quantization, QUANTIZATIONS)
        _check_choice("resources.generator.weight_slots", self.weight_slots, WEIGHT_SLOTS)


@dataclass
class TrainerResources:
    num_devices: int = 1                 # trainer ranks (devices) in all
    fsdp: int = 1                        # parameter/grad/optimizer sharding group; 0 = all DP ranks
    tp: int = 1                          # tensor parallel size
    pp: int = 1                          # pipeline stages
    dp: int = 0                          # replicas of the sharded model; 0 = derived
    dtype: str = "float32"               # compute dtype; bf16/fp16 = mixed precision over an fp32
                                         # master copy (training is never quantized)
    strategy: str = "ddp"                # ddp | fsdp2 (data parallel implementation)
    activation_checkpointing: bool = False  # recompute activations in the backward: less memory, more time
    micro_batch_size: int = 16           # sequences per forward/backward on one rank
    threads: int = 0                     # torch threads per rank on CPU; 0 = planned
    stream_groups: bool = True           # async, one rank, one update per batch: micro-batches start
                                         # on groups as they arrive (config/streaming.py)

    def __post_init__(self):
        for k in ("num_devices", "tp", "pp", "micro_batch_size"):
            _check_positive(f"resources.trainer.{k}", getattr(self, k))
        _check_positive("resources.trainer.fsdp", self.fsdp, 0)
        _check_positive("resources.trainer.dp", self.dp, 0)
        _check_positive("resources.trainer.threads", self.threads, 0)
        _check_choice("resources.trainer.dtype", self.dtype, DTYPES)
        _check_choice("resources.trainer.strategy", self.strategy, STRATEGIES)


@dataclass
class RewardResources:
    num_devices: int = 1                 # reward ranks (CPU processes; use no accelerator)
    workers: int = 1                     # verifier subprocesses per reward rank
    timeout_s: float = 2.0               # wall-clock limit per verification

    def __post_init__(self):
        _check_positive("resources.reward.num_devices", self.num_devices)
        _check_positive("resources.reward.workers", self.workers)
        _check_number("resources.reward.timeout_s", self.timeout_s, above=0)


@dataclass
class ResourcesConfig:
    device: str = "cpu"                  # cpu | cuda (any NVIDIA GPU) | h100-80gb | h200-141gb
    nodes: int = 1                       # machines the plan spreads the roles over
    devices_per_node: int = 0            # 0 = the device type's default (8 GPUs; CPU cores)
    cpu_cores: int = 0                   # 0 = os.cpu_count(); CPU thread budget
    host_memory_gib: float = 0.0         # 0 = read from the host (CPU capacity)
    hostnames: str = "node-{index}"      # multi-node torchrun rendezvous hosts
    share_devices: bool = False          # async generator and trainer (1 rank each) on one GPU:
                                         # weights by CUDA IPC, the rest over gloo (NCCL refuses)
    generator: GeneratorResources = field(default_factory=GeneratorResources)
    trainer: TrainerResources = field(default_factory=TrainerResources)
    reward: RewardResources = field(default_factory=RewardResources)

    def __post_init__(self):
        _check_choice("resources.device", self.device, DEVICE_TYPES)
        _check_positive("resources.nodes", self.nodes)
        _check_positive("resources.devices_per_node", self.devices_per_node, 0)
        _check_positive("resources.cpu_cores", self.cpu_cores, 0)
        _check_number("resources.host_memory_gib", self.host_memory_gib, at_least=0)


@dataclass
class AlgorithmConfig:
    """The RL objective and its knobs; docs/ALGORITHMS.md gives each one's formula and source."""
    name: str = "aipo"                   # aipo | pg | ppo | clamp | gspo
    rho: float = 4.0                     # AIPO importance-ratio cap
    clip_eps: float = 0.2                # PPO/GRPO clip range, both sides (the symmetric shorthand)
    clip_eps_low: Optional[float] = None   # DAPO clip-higher: ratio >= 1 - clip_eps_low; None = clip_eps
    clip_eps_high: Optional[float] = None  # ratio <= 1 + clip_eps_high; None = clip_eps
    dual_clip_c: Optional[float] = None  # dual-clip PPO: for A < 0 the objective is at least c*A; > 1; None = off (ppo, gspo)
    group_size: int = 8                  # samples per prompt
    prompts_per_step: int = 32           # prompts per step (its batch; mini_batches optimizer steps)
    lr: float = 2e-4                     # the RL learning rate (AdamW)
    lr_warmup_steps: int = 10            # linear warm-up of the RL learning rate
    lr_schedule: str = "constant"        # after the warm-up, over run.max_steps: constant | linear | cosine
    min_lr_ratio: float = 0.0            # linear/cosine end at min_lr_ratio * lr
    updates_per_batch: int = 1           # passes over each batch (PPO epochs); > 1 records pi_old
    mini_batches: int = 1                # optimizer steps per pass, each on 1/mini_batches of the rows
    weight_decay: float = 0.0            # AdamW's decoupled weight decay
    grad_clip: float = 1.0               # the gradients' global norm is clipped to this
    kl_coef: float = 0.0                 # KL to a frozen reference (k3); > 0 loads one, sharded like the trainer
    kl_estimator: str = "k3"             # per-token KL estimate: k1 | k2 | k3 (Schulman 2020)
    kl_in: str = "loss"                  # where the KL acts: loss (a loss term) | reward (r - kl_coef * sum_t k_t)
    mismatch: str = "none"               # train-inference mismatch correction: none | tis (token) | mis (sequence)
    mismatch_cap: float = 2.0            # tis: the weight's cap; mis: sequences with pi_old/mu above it are masked
    entropy_coef: float = 0.0            # weight of the entropy bonus subtracted from the loss
    advantage: str = "mean"              # mean | loo | std
    aggregation: str = "token_mean"      # token_mean | sequence_mean
    length_norm: str = "tokens"          # tokens (divide by the counted tokens) | constant (Dr.GRPO:
                                         # each sequence's token sum / generation.max_new_tokens)
    dynamic_sampling: bool = False       # DAPO: train only groups whose rewards differ, resampling to fill the step
    max_resample_rounds: int = 4         # dynamic sampling: extra chunks per generator replica per step, at most
    overlong: str = "keep"               # completions cut at generation.max_new_tokens: keep | filter | penalty
    overlong_buffer_tokens: int = 0      # penalty: the last this many tokens ramp the penalty from 0 to -1
    max_offpolicy_steps: int = 1         # k: 0 = synchronous, colocated; >= 1 = async

    def __post_init__(self):
        _check_choice("algorithm.name", self.name, LOSS_KINDS)
        _check_choice("algorithm.advantage", self.advantage, ADVANTAGE_MODES)
        _check_choice("algorithm.aggregation", self.aggregation, AGGREGATIONS)
        _check_choice("algorithm.length_norm", self.length_norm, LENGTH_NORMS)
        _check_choice("algorithm.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _check_choice("algorithm.overlong", self.overlong, OVERLONG_MODES)
        _check_positive("algorithm.group_size", self.group_size)
        _check_positive("algorithm.prompts_per_step", self.prompts_per_step)
        _check_positive("algorithm.max_offpolicy_steps", self.max_offpolicy_steps, 0)
        for key in ("rho", "lr", "grad_clip"):
            _check_number(f"algorithm.{key}", getattr(self, key), above=0)
        for key in ("weight_decay", "kl_coef", "entropy_coef"):
            _check_number(f"algorithm.{key}", getattr(self, key), at_least=0)
        _check_positive("algorithm.lr_warmup_steps", self.lr_warmup_steps, 0)
        _check_positive("algorithm.updates_per_batch", self.updates_per_batch)
        _check_positive("algorithm.mini_batches", self.mini_batches)
        _check_positive("algorithm.max_resample_rounds", self.max_resample_rounds, 0)
        _check_positive("algorithm.overlong_buffer_tokens", self.overlong_buffer_tokens, 0)
        _check_number("algorithm.min_lr_ratio", self.min_lr_ratio, at_least=0)
        if self.min_lr_ratio > 1:
            raise ConfigError(f"algorithm.min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        self._check_clip()
        self._check_loss_options()
        self._check_kl_and_mismatch()
        if self.dynamic_sampling and self.group_size < 2:
            raise ConfigError("algorithm.dynamic_sampling=true needs algorithm.group_size >= 2: a group of "
                              "one sample always scores alike and would always be dropped")
        if self.advantage in GROUP_RELATIVE_ADVANTAGES and self.group_size < 2:
            raise ConfigError(f"algorithm.group_size={self.group_size}: with a group-relative advantage "
                              f"(algorithm.advantage={self.advantage}) every advantage is 0, so nothing is "
                              f"learned; use >= 2")
        if self.overlong == "penalty" and self.overlong_buffer_tokens < 1:
            raise ConfigError("algorithm.overlong=penalty needs algorithm.overlong_buffer_tokens >= 1 "
                              "(the length over which the penalty ramps from 0 to -1)")
        if self.overlong != "penalty" and self.overlong_buffer_tokens:
            raise ConfigError(f"algorithm.overlong_buffer_tokens={self.overlong_buffer_tokens} is read only "
                              f"with algorithm.overlong=penalty (got {self.overlong!r})")

    def _check_clip(self) -> None:
        """Precedence: a bound given explicitly wins; a bound left unset takes clip_eps. With both
        bounds set, clip_eps would have no effect, so a clip_eps other than its default is refused
        as contradictory rather than silently ignored."""
        low, high = self.clip_range()
        for key, v in (("clip_eps", self.clip_eps), ("clip_eps_low", low), ("clip_eps_high", high)):
            _check_number(f"algorithm.{key}", v, above=0)
        if low >= 1:
            raise ConfigError(f"algorithm.clip_eps_low={low} must be < 1 (the ratio's lower bound is 1 - it)")
        default = next(f.default for f in fields(self) if f.name == "clip_eps")
        if self.clip_eps_low is not None and self.clip_eps_high is not None and self.clip_eps != default:
            raise ConfigError(f"algorithm.clip_eps={self.clip_eps} contradicts algorithm.clip_eps_low="
                              f"{self.clip_eps_low} and algorithm.clip_eps_high={self.clip_eps_high}: "
                              f"with both bounds set the symmetric clip_eps has no effect; drop it")

    def _check_loss_options(self) -> None:
        """dual_clip_c bounds a clipped objective (ppo, gspo) and must sit above the clip range's
        top; the constant length normaliser replaces token counts, which sequence_mean has none of."""
        if self.dual_clip_c is not None:
            _check_number("algorithm.dual_clip_c", self.dual_clip_c, above=1)
            if self.name not in DUAL_CLIP_KINDS:
                raise ConfigError(f"algorithm.dual_clip_c={self.dual_clip_c} needs algorithm.name in "
                                  f"{DUAL_CLIP_KINDS}, got algorithm.name={self.name}: only they clip a ratio")
        if self.length_norm == "constant" and self.aggregation == "sequence_mean":
            raise ConfigError("algorithm.length_norm=constant contradicts algorithm.aggregation=sequence_mean: "
                              "Dr.GRPO divides each sequence's token sum by the constant, not by its length; "
                              "use algorithm.aggregation=token_mean")

    def _check_kl_and_mismatch(self) -> None:
        """A knob that would have no effect is refused, naming the key that makes it so."""
        _check_choice("algorithm.kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        _check_choice("algorithm.kl_in", self.kl_in, KL_PLACEMENTS)
        _check_choice("algorithm.mismatch", self.mismatch, MISMATCH_MODES)
        _check_number("algorithm.mismatch_cap", self.mismatch_cap, above=0)
        default = {f.name: f.default for f in fields(self)}
        for key in ("kl_estimator", "kl_in"):
            if getattr(self, key) != default[key] and self.kl_coef == 0:
                raise ConfigError(f"algorithm.{key}={getattr(self, key)} with algorithm.kl_coef=0: there is no "
                                  f"KL term; set algorithm.kl_coef > 0")
        if self.mismatch_cap != default["mismatch_cap"] and self.mismatch == "none":
            raise ConfigError(f"algorithm.mismatch_cap={self.mismatch_cap} with algorithm.mismatch=none: the cap "
                              f"is unused; set algorithm.mismatch=tis or mis")
        if self.mismatch != "none" and self.name == "clamp":
            raise ConfigError(f"algorithm.mismatch={self.mismatch} with algorithm.name=clamp: clamp caps the "
                              f"whole ratio pi/mu itself; use name=ppo, pg or aipo")
        if self.mismatch == "tis" and self.name == "aipo":
            raise ConfigError("algorithm.mismatch=tis with algorithm.name=aipo: AIPO is TIS already "
                              "(its weight min(pi/mu, rho)); its cap is algorithm.rho")
        if self.mismatch == "mis" and self.name == "aipo" and self.rho != default["rho"]:
            raise ConfigError(f"algorithm.rho={self.rho} with algorithm.mismatch=mis: AIPO's truncated weight is "
                              f"replaced by the MIS weight, whose cap is algorithm.mismatch_cap; drop rho")

    def clip_range(self) -> tuple[float, float]:
        """(eps_low, eps_high): PPO keeps the ratio in [1 - eps_low, 1 + eps_high]."""
        return (self.clip_eps if self.clip_eps_low is None else self.clip_eps_low,
                self.clip_eps if self.clip_eps_high is None else self.clip_eps_high)


@dataclass
class WarmStartConfig:
    steps: int = 0                       # supervised steps before RL, on reference solutions (or `data`'s chats)
    batch_size: int = 32                 # sequences per supervised step
    lr: float = 1e-3                     # the supervised steps' learning rate
    data: Optional[str] = None           # your own chats ({"messages": [...]} rows, .jsonl or a table):
                                         # the steps train on their assistant turns instead (docs/DATA.md)

    def __post_init__(self):
        _check_positive("warmstart.steps", self.steps, 0)
        _check_positive("warmstart.batch_size", self.batch_size)
        _check_number("warmstart.lr", self.lr, above=0)
        if self.data is not None and (not isinstance(self.data, str) or not self.data.strip()):
            raise ConfigError(f"warmstart.data={self.data!r} must be a file path")
        if self.data and self.steps == 0:
            raise ConfigError(f"warmstart.data={self.data} with warmstart.steps=0: the chats would be unused; "
                              f"set warmstart.steps to how many supervised steps to train on them")


@dataclass
class GenerationConfig:
    max_new_tokens: int = 32             # completion length limit, in tokens
    temperature: float = 1.0             # sampling temperature of the training rollouts; > 0
    top_p: float = 1.0                   # nucleus sampling: keep the smallest token set of this mass; 1 = off
    top_k: int = 0                       # keep the k most likely tokens; 0 = off
    min_p: float = 0.0                   # keep tokens of at least min_p x the most likely one's probability
                                         # (after temperature, before top-k/top-p, as vLLM); 0 = off; in [0, 1)
    repetition_penalty: float = 1.0      # CTRL: a prompt or completion token's raw logit / this if > 0,
                                         # x this if < 0 (before temperature, as vLLM); 1 = off; > 0
    stop_strings: List[str] = field(default_factory=list)  # a completion ends at the first of these
    max_prompt_tokens: int = 64          # longest prompt in tokens; a longer one is refused before launch
    batching: str = "continuous"         # continuous (refill a finished row's slot) | static
    cuda_graphs: bool = False            # capture the decode step in CUDA graphs (GPU only;
                                         # not built yet: the plan refuses true)

    def __post_init__(self):
        _check_choice("generation.batching", self.batching, BATCHING)
        _check_positive("generation.max_new_tokens", self.max_new_tokens)
        _check_positive("generation.max_prompt_tokens", self.max_prompt_tokens)
        # the check users see (exit 2, names the key); generation/sampling.sampling_logprobs
        # guards direct callers with the same rule
        if not self.temperature > 0 or not math.isfinite(self.temperature):
            raise ConfigError(f"generation.temperature={self.temperature} must be > 0: RL needs the "
                              f"behaviour policy's probabilities, and greedy decoding has none")
        _check_positive("generation.top_k", self.top_k, 0)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"generation.top_p={self.top_p} must be in (0, 1]")
        if not 0 <= self.min_p < 1:
            raise ConfigError(f"generation.min_p={self.min_p} must be in [0, 1) (0 = off)")
        if not self.repetition_penalty > 0 or not math.isfinite(self.repetition_penalty):
            raise ConfigError(f"generation.repetition_penalty={self.repetition_penalty} must be > 0 (1 = off)")

    def changes_distribution(self) -> bool:
        """Whether the sampling distribution is other than softmax(logits / T): the one rule for
        when the KL (defined on the plain softmax, as TRL and veRL do) needs its own untruncated
        log-probs instead of the sampling ones (executors/learner.py)."""
        return bool(self.top_k) or self.top_p < 1 or self.min_p > 0 or self.repetition_penalty != 1


# `data.instruction`'s default per data set (`data.name`, or `eval.data` for `llamarl eval`):
# the answer format its verifier reads. A name not listed has none.
DEFAULT_INSTRUCTIONS = {
    "gsm8k": "Give the final answer on its own line as '#### <number>'.",
    "math500": "Put the final answer in \\boxed{}.",
    "reasoning_gym": "Give the final answer inside <answer></answer> tags.",  # what its scorer reads
}


@dataclass
class DataConfig:
    name: str = "arith"                  # arith | gsm8k | math500 | generic | reasoning_gym (needs data.task)
    task: Optional[str] = None           # data.name=reasoning_gym: the task (`llamarl data tasks` lists them)
    task_config: Dict[str, Any] = field(default_factory=dict)  # data.name=reasoning_gym: the task's own
                                         # config keywords, e.g. {min_digits: 2, max_digits: 2}
    path: Optional[str] = None           # train data: .jsonl/.json/.parquet/.csv or a save_to_disk folder
                                         # (required for gsm8k/math500/generic)
    eval_path: Optional[str] = None      # held-out data; defaults to a split of `path`
    reward: str = "auto"                 # auto (from name) | arith | gsm8k | math | package.module:function
                                         # | path/to/file.py:function (docs/REWARDS.md, "Your reward");
                                         # with data.rewards set, the held-out accuracy's reward only
    rewards: List[RewardTerm] = field(default_factory=list)  # [] = train on `reward`; else the training
                                         # reward is sum_i weight_i * fn_i, e.g. '[{fn: gsm8k, weight: 1.0},
                                         # {fn: examples/format_reward.py:has_answer_line, weight: 0.2}]'
    prompt_key: Optional[str] = None     # the row field holding the prompt (default: generic "prompt",
                                         # gsm8k "question", math500 "problem")
    answer_key: Optional[str] = None     # the row field holding the reference answer (default "answer")
    messages_key: Optional[str] = None   # the row field holding a chat message list (needs template=chat)
    template: str = "auto"               # auto (chat if the checkpoint's tokenizer has a chat
                                         # template, else plain) | plain | chat
    chat_template_kwargs: Dict[str, Any] = field(default_factory=dict)  # extra variables for every
                                         # apply_chat_template call, e.g. {enable_thinking: false} (Qwen3)
    system_prompt: Optional[str] = None  # a system message (plain: a first paragraph); none by default
    instruction: Optional[str] = None    # appended to the question on a new line; None = the data
                                         # set's DEFAULT_INSTRUCTIONS entry, "" = none (docs/DATA.md)
    on_error: str = "raise"              # raise | skip malformed data lines (counted, in summary.json)
    num_train_examples: int = 2000       # for the built-in task
    num_eval_examples: Optional[int] = None  # held-out rows; unset: 200, at most a fifth of a one-file
                                         # data set's rows (the rule: data/splits.py held_out_count)
    digits: int = 2                      # built-in task difficulty
    num_operands: int = 2                # built-in task: numbers added per problem
    solution_style: str = "columns"      # built-in task's worked solution: columns | digit_sums | short
    seed: int = 0                        # picks the problems and the train/test split; run.seed
                                         # varies the run (init, prompt order, sampling), not these

    def __post_init__(self):
        _check_choice("data.name", self.name, DATA_NAMES)
        _check_choice("data.template", self.template, PROMPT_TEMPLATES)
        _check_choice("data.on_error", self.on_error, ON_ERROR_MODES)
        _check_reward(self.reward)
        _check_reward_terms(self.rewards)
        self._check_task()
        _check_choice("data.solution_style", self.solution_style, SOLUTION_STYLES)
        _check_positive("data.num_train_examples", self.num_train_examples)
        if self.num_eval_examples is not None:
            _check_positive("data.num_eval_examples", self.num_eval_examples, 0)
        if not 1 <= self.digits <= 9:
            raise ConfigError(f"data.digits={self.digits} must be in 1..9")
        _check_positive("data.num_operands", self.num_operands, 2)
        for key in ("prompt_key", "answer_key", "messages_key"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"data.{key}={value!r} must be a field name")
        if self.messages_key and self.template != "chat":
            raise ConfigError(f"data.messages_key={self.messages_key} holds chat messages: it needs "
                              f"data.template=chat (got {self.template})")
        _check_template_kwargs(self.chat_template_kwargs)
        if self.messages_key and self.prompt_key:
            raise ConfigError("data.messages_key and data.prompt_key both say where the prompt is: set one")

    def _check_task(self) -> None:
        """data.task goes with data.name=reasoning_gym and only with it (whether reasoning-gym knows
        the task is checked before launch, data/reasoning_gym_tasks.py: importing it is slow)."""
        gym = self.name == "reasoning_gym"
        if gym and not (isinstance(self.task, str) and self.task.strip()):
            raise ConfigError("data.name=reasoning_gym needs data.task=NAME (`llamarl data tasks` lists them)")
        if not gym and self.task is not None:
            raise ConfigError(f"data.task={self.task} is for data.name=reasoning_gym, not data.name={self.name}")
        if not gym and self.task_config:
            raise ConfigError(f"data.task_config is for data.name=reasoning_gym, not data.name={self.name}")
        if self.reward == "reasoning_gym" and not gym:
            raise ConfigError(f"data.reward=reasoning_gym scores reasoning-gym rows: it needs "
                              f"data.name=reasoning_gym (got data.name={self.name})")

    def instruction_for(self, data_name: Optional[str] = None) -> str:
        """`instruction`, its default resolved for `data_name` (default `name`): the one place."""
        if self.instruction is not None:
            return self.instruction
        return DEFAULT_INSTRUCTIONS.get(data_name or self.name, "")

    def arith_knobs(self) -> dict:
        """The built-in task's difficulty keywords for `arith_examples` / `resolve_dataset`."""
        return {"digits": self.digits, "num_operands": self.num_operands,
                "solution_style": self.solution_style}


@dataclass
class RunConfig:
    dir: Optional[str] = None            # default runs/<recipe>; suffixed if it exists
    seed: int = 0                        # the run's seed: init, prompt order, sampling
    max_steps: int = 100                 # RL steps (batches of algorithm.prompts_per_step prompts)
    max_time_s: float = 0.0              # stop RL after this wall time; 0 = no limit
    eval_every_steps: int = 10           # held-out eval every N steps, also before RL and at the
                                         # end; 0 = none in between
    checkpoint_every_steps: int = 25     # resumable checkpoints/step_<N>/; 0 = only the final HF export
    keep_checkpoints: int = 2            # newest stable step_<N> checkpoints kept (plus checkpoints/final)
    resume: str = ""                     # "" = fresh run | auto = newest stable checkpoint in run.dir | a step_<N> path
    weight_checksums: bool = False       # record a sha256 of the weights at every sync (tests)

    def __post_init__(self):
        _check_positive("run.max_steps", self.max_steps, 0)
        _check_positive("run.eval_every_steps", self.eval_every_steps, 0)
        _check_positive("run.checkpoint_every_steps", self.checkpoint_every_steps, 0)
        _check_positive("run.keep_checkpoints", self.keep_checkpoints, 1)
        _check_number("run.max_time_s", self.max_time_s, at_least=0)


@dataclass
class ControllerConfig:
    host: str = "127.0.0.1"              # loopback unless told otherwise
    port: int = 0                        # 0 = a free port; a busy port falls back to a free one
    role_port_base: int = 29510          # multi-node torchrun rendezvous ports, one per role
    weight_transport: str = "auto"       # auto | collective | shm | cuda_ipc (shared GPU)
    weight_bucket_mb: float = 256.0      # weight sync: a trainer rank's extra memory per sync (2 pieces of half)
    heartbeat_interval_s: float = 1.0    # how often each rank reports that it is alive
    heartbeat_timeout_s: float = 120.0   # a rank whose main loop makes no progress this long is
                                         # hung; must exceed one chunk's generation or one eval
    startup_timeout_s: float = 120.0     # a rank that has not started (registered) by then fails the run
    step_timeout_s: float = 600.0        # the longest any role waits on another
    max_restarts: int = 3                # restarts of a dead generator/reward group, per role (0: a death ends the run)

    def __post_init__(self):
        _check_choice("controller.weight_transport", self.weight_transport, WEIGHT_TRANSPORTS)
        for key in ("weight_bucket_mb", "heartbeat_interval_s", "heartbeat_timeout_s", "startup_timeout_s",
                    "step_timeout_s"):
            _check_number(f"controller.{key}", getattr(self, key), above=0)
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ConfigError(f"controller.heartbeat_timeout_s={self.heartbeat_timeout_s:g} must exceed "
                              f"controller.heartbeat_interval_s={self.heartbeat_interval_s:g}")
        _check_positive("controller.max_restarts", self.max_restarts, 0)
        if not 0 <= self.port < 65536:
            raise ConfigError(f"controller.port={self.port} must be in [0, 65535]")
        if not 1 <= self.role_port_base <= 65533:
            raise ConfigError(f"controller.role_port_base={self.role_port_base} must be in [1, 65533] "
                              f"(it and the next two ports: one per role)")


@dataclass
class EvalConfig:
    checkpoint: Optional[str] = None     # the Hugging Face directory `llamarl eval` scores
    data: Optional[str] = None           # arith | gsm8k | math500 | path/to.jsonl
    split: str = "test"                  # which split of eval.data: test = the held-out rows
    policy: str = "model"                # model | reference (score the references)
    n_samples: int = 1                   # samples per prompt; > 1 adds pass@k and maj@k
    temperature: float = 0.0             # 0 = greedy
    max_new_tokens: int = 0              # 0 = generation.max_new_tokens
    num_examples: int = 0                # 0 = all (arith: data.num_eval_examples)
    out: Optional[str] = None            # run directory; default run.dir, else runs/eval-<data>-<time>

    def __post_init__(self):
        _check_choice("eval.policy", self.policy, EVAL_POLICIES)
        _check_choice("eval.split", self.split, SPLITS)
        check_eval_sampling(self.n_samples, self.temperature)
        _check_positive("eval.max_new_tokens", self.max_new_tokens, 0)
        _check_positive("eval.num_examples", self.num_examples, 0)


def check_eval_sampling(n_samples: int, temperature: float, prefix: str = "eval.") -> None:
    """The one rule for eval sampling (temperature 0 is greedy, so one sample): EvalConfig
    applies it naming the eval.* keys (exit 2); eval/evaluate.py applies it, prefix "", to
    direct callers of generate_predictions."""
    _check_positive(f"{prefix}n_samples", n_samples)
    _check_number(f"{prefix}temperature", temperature, at_least=0)
    if n_samples > 1 and temperature == 0:
        raise ConfigError(f"{prefix}n_samples={n_samples} with {prefix}temperature=0 gives "
                          f"{n_samples} identical greedy samples; set temperature > 0")


@dataclass
class LoggingConfig:
    tensorboard: bool = True             # event files under <run_dir>/tb/ (needs `tensorboard`)
    wandb: bool = False                  # Weights & Biases under <run_dir>/wandb/ (needs `wandb`;
                                         # WANDB_MODE=offline writes files only)
    wandb_project: str = "llamarl"       # the Weights & Biases project
    wandb_run_name: Optional[str] = None  # None = the run directory's name
    samples_per_eval: int = 4            # (prompt, completion, reward) rows per held-out eval
    trained_samples_per_step: int = 0    # rows of every trained batch in trained_samples.jsonl (0: none)

    def __post_init__(self):
        _check_positive("logging.samples_per_eval", self.samples_per_eval, 0)
        _check_positive("logging.trained_samples_per_step", self.trained_samples_per_step, 0)


@dataclass
class RewardSettings:
    max_abs: float = 1e6                 # a reward that is not a number, or |r| above this, is an
                                         # error for that sample (scored 0, counted in reward/errors)

    def __post_init__(self):
        _check_number("reward.max_abs", self.max_abs, above=0)


@dataclass
class TrainerSettings:
    max_nonfinite_steps: int = 3         # steps in a row whose loss or grad norm is not finite
                                         # (each skipped, trainer/nonfinite_steps) before the run stops
    adam_betas: Optional[List[float]] = None  # AdamW (beta1, beta2) of RL and the warm start; None = RL
                                         # (0.9, 0.95), warm start (0.9, 0.999) (algorithms/optimizer.py)
    adam_eps: float = 1e-8               # AdamW epsilon of RL and the warm start (TRL's adam_epsilon)

    def __post_init__(self):
        _check_positive("trainer.max_nonfinite_steps", self.max_nonfinite_steps)
        if self.adam_betas is not None:
            betas = list(self.adam_betas)
            if len(betas) != 2 or not all(math.isfinite(b) and 0 <= b < 1 for b in betas):
                raise ConfigError(f"trainer.adam_betas={betas} must be two numbers in [0, 1) (beta1, beta2)")
        _check_number("trainer.adam_eps", self.adam_eps, above=0)


@dataclass
class ExportConfig:
    dtype: str = "auto"                  # HF exports' weights (checkpoints/final, `llamarl export`): auto =
                                         # model.checkpoint's config.json torch_dtype (presets: float32)

    def __post_init__(self):
        _check_choice("export.dtype", self.dtype, EXPORT_DTYPES)


@dataclass
class EnvConfig:
    """Multi-turn episodes (docs/ENVIRONMENTS.md): an environment per episode, tools as functions.
    Neither `entry` nor `tools` set: one turn per episode, scored by `data.reward`."""

    entry: Optional[str] = None          # path/to/file.py:Class or package.module:Class: one per episode,
                                         # reset(example) -> messages, step(text) -> (messages, reward, done)
    tools: Optional[str] = None          # path/to/file.py:calc,search (or module:calc,search): Python
                                         # functions the model calls; without `entry`, the built-in tool env
    tool_parser: str = "hermes"          # hermes (<tool_call>{json}</tool_call>: Qwen, SmolLM) | llama3
    max_turns: int = 4                   # assistant turns per episode; then it ends, truncated
    max_episode_tokens: int = 512        # tokens after the opening prompt (model + environment)
    step_timeout_s: float = 30.0         # one reset/step of an environment (tools included); then
                                         # its worker is killed and its episodes fail (counted)
    workers: int = 2                     # environment worker processes per generator rank
    max_message_chars: int = 4000        # an environment's or tool's message is cut to this

    def __post_init__(self):
        _check_choice("env.tool_parser", self.tool_parser, TOOL_PARSERS)
        _check_positive("env.max_turns", self.max_turns)
        _check_positive("env.max_episode_tokens", self.max_episode_tokens)
        _check_number("env.step_timeout_s", self.step_timeout_s, above=0)
        _check_positive("env.workers", self.workers)
        _check_positive("env.max_message_chars", self.max_message_chars)

    @property
    def enabled(self) -> bool:
        """Whether episodes run an environment (else one turn, no environment process)."""
        return bool(self.entry or self.tools)


@dataclass
class LlamaRLConfig:
    recipe: str = "cpu_tiny"             # the recipe's name, filled in by the CLI
    model: ModelConfig = field(default_factory=ModelConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    data: DataConfig = field(default_factory=DataConfig)
    run: RunConfig = field(default_factory=RunConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    reward: RewardSettings = field(default_factory=RewardSettings)
    trainer: TrainerSettings = field(default_factory=TrainerSettings)
    export: ExportConfig = field(default_factory=ExportConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
