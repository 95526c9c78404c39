"""Every closed set of values a config key accepts, written once.

The schema checks against these; the code that acts on a value imports the same tuple
(`aipo_loss` the loss kinds and aggregations, `compute_advantages` the advantage modes, the
memory model and the simulator the byte sizes), so a value the config accepts is always one
the code knows.
"""
from __future__ import annotations

from llamarl_core.config.hardware import DEVICES

LOSS_KINDS = ("aipo", "pg", "ppo", "clamp")              # algorithm.name
ADVANTAGE_MODES = ("mean", "loo", "std")                 # algorithm.advantage
AGGREGATIONS = ("token_mean", "sequence_mean")           # algorithm.aggregation
OVERLONG_MODES = ("keep", "filter", "penalty")           # algorithm.overlong
LR_SCHEDULES = ("constant", "linear", "cosine")          # algorithm.lr_schedule
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = tuple(DTYPE_BYTES)                              # model / generator / trainer dtypes
QUANT_BYTES = {"int8": 1, "fp8": 1}                      # weight-only, per block-linear weight
QUANTIZATIONS = ("none", *QUANT_BYTES)                   # resources.generator.quantization
DEVICE_TYPES = ("cpu", "cuda", *DEVICES)                 # resources.device (cuda: any NVIDIA GPU)
STRATEGIES = ("ddp", "fsdp2")                            # resources.trainer.strategy
WEIGHT_TRANSPORTS = ("auto", "collective", "shm", "cuda_ipc")  # controller.weight_transport
BATCHING = ("continuous", "static")                      # generation.batching
PROMPT_TEMPLATES = ("auto", "plain", "chat")             # data.template
DATA_NAMES = ("arith", "gsm8k", "math500", "generic")      # data.name
BUILTIN_REWARDS = ("arith", "gsm8k", "math")             # data.reward (beside auto and module:function)
WEIGHT_SLOTS = (1, 2)                                    # resources.generator.weight_slots
