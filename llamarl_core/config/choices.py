"""Every closed set of values a config key accepts, written once.

The schema checks against these; the code that acts on a value imports the same tuple
(`aipo_loss` the loss kinds and aggregations, `compute_advantages` the advantage modes, the
memory model and the simulator the byte sizes, the prompt templates, the built-in task, the
loaders, the reward registry, the DDMA transports), so a value the config accepts is always
one the code knows; tests/unit/test_one_source.py holds each registry to its list here.
Defaults are the schema's (config/schema.py): a function's keyword default that mirrors a
config key reads it from the schema's dataclass, never a second literal.
"""
from __future__ import annotations

from llamarl_core.config.hardware import DEVICES

LOSS_KINDS = ("aipo", "pg", "ppo", "clamp", "gspo")      # algorithm.name
DUAL_CLIP_KINDS = ("ppo", "gspo")                        # the kinds algorithm.dual_clip_c applies to
KL_ESTIMATORS = ("k1", "k2", "k3")                       # algorithm.kl_estimator (Schulman 2020)
KL_PLACEMENTS = ("loss", "reward")                       # algorithm.kl_in
MISMATCH_MODES = ("none", "tis", "mis")                  # algorithm.mismatch
ADVANTAGE_MODES = ("mean", "loo", "std")                 # algorithm.advantage
# the modes that subtract the group's mean: a group of one sample has advantage 0, nothing to learn
GROUP_RELATIVE_ADVANTAGES = ("mean", "loo", "std")
AGGREGATIONS = ("token_mean", "sequence_mean")           # algorithm.aggregation
LENGTH_NORMS = ("tokens", "constant")                    # algorithm.length_norm (constant: Dr.GRPO)
OVERLONG_MODES = ("keep", "filter", "penalty")           # algorithm.overlong
LR_SCHEDULES = ("constant", "linear", "cosine")          # algorithm.lr_schedule
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = tuple(DTYPE_BYTES)                              # model / generator / trainer dtypes
EXPORT_DTYPES = ("auto", *DTYPES)                        # export.dtype (auto: the checkpoint's own)
QUANT_BYTES = {"int8": 1, "fp8": 1}                      # weight-only, per block-linear weight
QUANTIZATIONS = ("none", *QUANT_BYTES)                   # resources.generator.quantization
DEVICE_TYPES = ("cpu", "cuda", *DEVICES)                 # resources.device (cuda: any NVIDIA GPU)
STRATEGIES = ("ddp", "fsdp2")                            # resources.trainer.strategy
DDMA_TRANSPORTS = ("collective", "shm", "cuda_ipc")      # what transport/ddma.py moves weights over
WEIGHT_TRANSPORTS = ("auto", *DDMA_TRANSPORTS)           # controller.weight_transport
BATCHING = ("continuous", "static")                      # generation.batching
PROMPT_TEMPLATES = ("auto", "plain", "chat")             # data.template
DATA_NAMES = ("arith", "gsm8k", "math500", "generic", "reasoning_gym")  # data.name
ON_ERROR_MODES = ("raise", "skip")                       # data.on_error (a malformed data line)
SOLUTION_STYLES = ("columns", "digit_sums", "short")     # data.solution_style (the built-in task)
# data.reward (beside auto and module:function): the reward registry's names (rewards/specs.py);
# math_symbolic is the math rule without its text fast path (verifies the rule on real data)
# reasoning_gym: the task's own scorer (data.name=reasoning_gym only), run in reward workers
BUILTIN_REWARDS = ("arith", "gsm8k", "math", "math_symbolic", "reasoning_gym")
EVAL_POLICIES = ("model", "reference")                   # eval.policy
SPLITS = ("train", "test")                               # eval.split, and every loader's split
WEIGHT_SLOTS = (1, 2)                                    # resources.generator.weight_slots
TOOL_PARSERS = ("hermes", "llama3")                      # env.tool_parser (envs/parsers.py)

# model.lora.target_modules: our projections (models/llama.py), and PEFT's names for them on
# Hugging Face Llama/Qwen/Mistral (accepted, mapped; docs/LORA.md)
LORA_TARGETS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
PEFT_TARGETS = {"q_proj": "wq", "k_proj": "wk", "v_proj": "wv", "o_proj": "wo",
                "gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}
