"""TRL's and veRL's names for what our keys do, for docs/CONFIG.md (config/doc.py renders them).

Looked up in TRL 1.16.0 (`trl/trainer/grpo_config.py`, and transformers' `TrainingArguments`,
which `GRPOConfig` extends) and veRL 0.9.1 (`verl/trainer/config/ppo_trainer.yaml` and the
actor, rollout, data and optim files it composes). `ours` holds keys or `key=value` words; the
tests hold every one to the schema (the key exists, the value is one it accepts). An empty
`ours` is rendered as `none` ("not supported" unless said otherwise): the note then says what
to do instead. Differences in meaning go in the note; what our key itself means is the schema's
comment, not repeated here.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mapping:
    theirs: str
    ours: tuple[str, ...]                 # "key" or "key=value"; () = no key of ours does it
    note: str = ""
    none: str = "not supported"           # the cell when `ours` is empty


@dataclass(frozen=True)
class Source:
    title: str
    intro: str
    column: str
    rows: tuple[Mapping, ...]


M = Mapping
PPO = "algorithm.name=ppo"

TRL = Source(
    "From TRL `GRPOConfig`",
    "TRL 1.16 `GRPOConfig` and the `TrainingArguments` it extends (plus three `GRPOTrainer` "
    "arguments). TRL always trains the clipped surrogate: ours does with `algorithm.name=ppo`; "
    "our default, `aipo`, caps the importance weight at `algorithm.rho` instead of clipping.",
    "TRL",
    (
        M("model (GRPOTrainer argument)", ("model.checkpoint",),
          "A local Hugging Face directory; nothing is downloaded at run time."),
        M("train_dataset / eval_dataset (GRPOTrainer arguments)", ("data.path", "data.eval_path"),
          "Files or `save_to_disk` folders; held-out rows default to a split of `data.path`."),
        M("reward_funcs (GRPOTrainer argument)", ("data.reward", "data.rewards"),
          "One function: a built-in name or `module:function` / `file.py:function`, called as "
          "`score(completion, example) -> float`, or on lists with `score.batch = True` (docs/REWARDS.md). "
          "Several: `data.rewards=[{fn: ..., weight: ...}, ...]`; `data.reward` stays the held-out accuracy's."),
        M("reward_weights", ("data.rewards",),
          "Each term's `weight`: reward = sum_i weight_i * r_i, as TRL; a failed term scores 0 (TRL: a None is "
          "dropped by nansum). Per term: `reward/<name>_mean` (TRL: `rewards/<func>/mean`)."),
        M("peft_config (GRPOTrainer argument): LoraConfig r / lora_alpha / lora_dropout",
          ("model.lora.rank", "model.lora.alpha", "model.lora.dropout"),
          "LoRA on the policy; only the adapters are trained, checkpointed and synced (docs/LORA.md)."),
        M("peft_config: LoraConfig target_modules", ("model.lora.target_modules",),
          "PEFT's names (`q_proj` ... `down_proj`, `all-linear`) are accepted; ours default to all seven."),
        M("model_init_kwargs / a PeftModel passed as model", ("model.lora.init_from",),
          "An adapter directory PEFT saved; the base is `model.checkpoint`."),
        M("learning_rate", ("algorithm.lr",), "TRL's default is 1e-6, ours 2e-4."),
        M("beta", ("algorithm.kl_coef",),
          "k3 KL to a frozen reference, in the loss; 0 (both defaults) loads no reference. TRL multiplies "
          "it by the ratio by default (`use_bias_correction_kl`); ours does not. TRL has only k3 in the "
          "loss; ours also `algorithm.kl_estimator=k1|k2` and `algorithm.kl_in=reward`."),
        M("vllm_importance_sampling_correction / vllm_importance_sampling_mode", ("algorithm.mismatch",),
          "`token_truncate` = `tis`, `sequence_mask` = `mis` (under `algorithm.name=ppo`, TRL's loss); "
          "`token_mask`, `sequence_truncate`: not supported. Ours' default `aipo` is token TIS already."),
        M("vllm_importance_sampling_cap", ("algorithm.mismatch_cap",), "2.0 in both."),
        M("epsilon", ("algorithm.clip_eps", PPO),
          "TRL's lower bound, and the upper one without `epsilon_high`; ours `clip_eps` is both sides, "
          "`algorithm.clip_eps_low` the lower alone."),
        M("epsilon_high", ("algorithm.clip_eps_high", PPO), "DAPO's clip-higher; unset = the lower bound, in both."),
        M("num_generations", ("algorithm.group_size",), ""),
        M("generation_batch_size", ("algorithm.prompts_per_step", "algorithm.group_size"),
          "TRL counts completions, ours prompts: generation_batch_size = prompts_per_step × group_size."),
        M("steps_per_generation", ("algorithm.mini_batches",),
          "TRL counts micro-steps: `mini_batches` = steps_per_generation ÷ gradient_accumulation_steps "
          "(1 by TRL's default), the optimizer steps per generated batch."),
        M("num_iterations", ("algorithm.updates_per_batch",), "μ, passes over each batch."),
        M("per_device_train_batch_size", ("resources.trainer.micro_batch_size",),
          "Sequences per forward/backward on one rank. In TRL it also sizes the batch; ours is "
          "`algorithm.prompts_per_step` × `algorithm.group_size` sequences."),
        M("gradient_accumulation_steps", (), "Derived: a step's batch is cut into micro-batches of "
          "`resources.trainer.micro_batch_size` per rank, all accumulated into the optimizer step.",
          none="not a key"),
        M("max_prompt_length", ("generation.max_prompt_tokens",),
          "In older TRL (0.24 has it, 0.29 and 1.x do not), which cut prompts from the left; ours refuses an over-long "
          "prompt before launch (exit 2, naming it)."),
        M("max_completion_length", ("generation.max_new_tokens",), ""),
        M("temperature", ("generation.temperature",), "Ours must be > 0: the loss needs the sampler's probabilities."),
        M("top_p", ("generation.top_p",), ""),
        M("top_k", ("generation.top_k",), "0 = off, in both."),
        M("min_p", ("generation.min_p",), "0 = off, in both; applied after temperature, before top-k/top-p "
          "(vLLM's order)."),
        M("repetition_penalty", ("generation.repetition_penalty",),
          "1 = off, in both; CTRL's rule on the raw logits of prompt and completion tokens (vLLM's)."),
        M("chat_template_kwargs", ("data.chat_template_kwargs",),
          "Passed to `apply_chat_template`, e.g. `{enable_thinking: false}`."),
        M("loss_type", ("algorithm.aggregation", "algorithm.length_norm"),
          "`grpo` = `sequence_mean`; `dapo` (TRL's default) and `bnpo` = `token_mean`, every token of the "
          "update weighted alike; `dr_grpo` = `token_mean` with `length_norm=constant` (the token sum over "
          "rows x `generation.max_new_tokens`). `cispo`, `sapo`, `luspo`, `vespo`: not supported."),
        M("scale_rewards", ("algorithm.advantage",),
          "`group` (default) = `std`, `none` = `mean`; `batch`: not supported. Ours divides by the "
          "population std + 1e-6, TRL by the sample std + 1e-4. `loo` is RLOO's baseline."),
        M("importance_sampling_level", ("algorithm.name=gspo",),
          "`token` = `ppo`; `sequence` (GSPO) = `gspo`, the same gradient; TRL's GSPO recipe pairs it with "
          "`loss_type=grpo` (our `aggregation=sequence_mean`) and epsilon 3e-4 / epsilon_high 4e-4 "
          "(`clip_eps_low` / `clip_eps_high`)."),
        M("mask_truncated_completions", ("algorithm.overlong=filter",),
          "`algorithm.overlong=penalty` is DAPO's soft length penalty instead."),
        M("entropy_coef", ("algorithm.entropy_coef",), ""),
        M("use_vllm", (), "llamarl generates with its own engine, in its generator role "
          "(`resources.generator.*`); there is no vLLM backend."),
        M("vllm_tensor_parallel_size", ("resources.generator.tp",), ""),
        M("vllm_importance_sampling_correction", ("algorithm.name=aipo",),
          "AIPO (our default) weights each token by min(π/μ, ρ), μ the generator's probability: TRL's "
          "`token_truncate` mode. It corrects staleness and engine mismatch alike."),
        M("vllm_importance_sampling_clip_max", ("algorithm.rho",), "The weight's cap (TRL 3.0, ours 4.0)."),
        M("adam_beta1 / adam_beta2", ("trainer.adam_betas",), "One key: `[beta1, beta2]`."),
        M("adam_epsilon", ("trainer.adam_eps",), ""),
        M("weight_decay", ("algorithm.weight_decay",), "AdamW's; 0 in both."),
        M("max_grad_norm", ("algorithm.grad_clip",), "1.0 in both."),
        M("lr_scheduler_type", ("algorithm.lr_schedule",),
          "`constant`, `linear`, `cosine` (to `algorithm.min_lr_ratio` × lr); the others: not supported. "
          "TRL defaults to `linear`, ours to `constant`, after `algorithm.lr_warmup_steps`."),
        M("warmup_steps", ("algorithm.lr_warmup_steps",), "TRL 0, ours 10."),
        M("num_train_epochs", (),
          "Ours counts steps: `run.max_steps` = epochs × rows ÷ `algorithm.prompts_per_step`; "
          "the rows are reshuffled each epoch."),
        M("max_steps", ("run.max_steps",),
          "Ours counts RL steps (one batch each), several optimizer steps when `algorithm.mini_batches` or "
          "`algorithm.updates_per_batch` > 1."),
        M("save_steps", ("run.checkpoint_every_steps",), "0 = only the final export."),
        M("save_total_limit", ("run.keep_checkpoints",), ""),
        M("eval_steps", ("run.eval_every_steps",), "Ours also evaluates before RL and at the end."),
        M("logging_steps", (), "Every step is a line of metrics.jsonl.", none="not needed"),
        M("log_completions", ("logging.samples_per_eval", "logging.trained_samples_per_step"), ""),
        M("report_to", ("logging.tensorboard", "logging.wandb"), ""),
        M("output_dir", ("run.dir",), ""),
        M("resume_from_checkpoint (train() argument)", ("run.resume",), ""),
        M("seed", ("run.seed",), "`data.seed` picks the problems and the split."),
        M("bf16", ("resources.trainer.dtype=bfloat16", "resources.generator.dtype=bfloat16"),
          "The trainer computes in it over an fp32 master copy, as TRL's mixed precision does. TRL's "
          "default is bf16, ours float32."),
        M("fp16", ("resources.trainer.dtype=float16", "resources.generator.dtype=float16"), ""),
        M("gradient_checkpointing", ("resources.trainer.activation_checkpointing",),
          "TRL defaults to true, ours to false."),
    ),
)

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
VERL = Source(
    "From veRL",
    "veRL 0.9.1's main `ppo_trainer.yaml` keys. veRL runs rollout and actor on the same GPUs by "
    "default; ours gives each role its own devices (`resources.generator.num_devices`, "
    "`resources.trainer.num_devices`) unless `algorithm.max_offpolicy_steps=0`.",
    "veRL",
    (
        M("actor_rollout_ref.model.path", ("model.checkpoint",), ""),
        M("actor_rollout_ref.model.lora_rank / lora_alpha", ("model.lora.rank", "model.lora.alpha"),
          "veRL syncs the adapters to vLLM as a LoRA request; ours merges them into the generator's "
          "own base copy (docs/LORA.md)."),
        M("actor_rollout_ref.model.target_modules", ("model.lora.target_modules",),
          "`all-linear` in both."),
        M("actor_rollout_ref.model.lora_adapter_path", ("model.lora.init_from",), ""),
        M("data.train_files / data.val_files", ("data.path", "data.eval_path"), ""),
        M("data.prompt_key", ("data.prompt_key", "data.messages_key"),
          "veRL's prompt column holds chat messages: ours reads such a column with `data.messages_key` "
          "(and `data.template=chat`)."),
        M("data.apply_chat_template_kwargs", ("data.chat_template_kwargs",), ""),
        M("data.train_batch_size", ("algorithm.prompts_per_step",), "Prompts per step, in both."),
        M("data.max_prompt_length", ("generation.max_prompt_tokens",),
          "An over-long prompt is an error in both (veRL's `data.truncation=error`, ours before launch); "
          "left/right/middle truncation: not supported."),
        M("data.max_response_length", ("generation.max_new_tokens",), ""),
        M("custom_reward_function.path / .name", ("data.reward",),
          "`data.reward=path/to/file.py:name`; ours is called as `score(completion, example) -> float` "
          "(docs/REWARDS.md), not `compute_score(data_source, solution_str, ground_truth, extra_info)`."),
        M("reward_model + custom_reward_function (combined in your compute_score)", ("data.rewards",),
          "veRL has one reward function per run; ours weighs several: "
          "`data.rewards=[{fn: gsm8k, weight: 1}, {fn: file.py:fmt, weight: 0.2}]` (docs/REWARDS.md)."),
        M("algorithm.adv_estimator", ("algorithm.advantage",),
          "`grpo` = `std` (or `mean` with `norm_adv_by_std_in_grpo=false`); `rloo` = `loo`; `gae`, "
          "`reinforce_plus_plus`, `remax` and the rest: not supported (no critic)."),
        M("algorithm.norm_adv_by_std_in_grpo", ("algorithm.advantage",),
          "true = `std`, false = `mean`. Ours divides by the population std, veRL by the sample std (+ 1e-6 both)."),
        M("algorithm.use_kl_in_reward", ("algorithm.kl_in",),
          "true = `kl_in=reward` (r - kl_coef × Σ_t k_t, before the advantages); false = `kl_in=loss` (ours' default)."),
        M("algorithm.kl_penalty", ("algorithm.kl_estimator",),
          "With `use_kl_in_reward`: `kl`/`k1` = `k1`, `mse`/`k2` = `k2`, `low_var_kl`/`k3` = `k3`; `abs`, `full`: "
          "not supported."),
        M("algorithm.kl_ctrl.kl_coef", ("algorithm.kl_coef", "algorithm.kl_in"),
          "Fixed coefficient only (`kl_ctrl.type=fixed`); the adaptive controller: not supported."),
        M("algorithm.filter_groups.enable", ("algorithm.dynamic_sampling",), ""),
        M("algorithm.filter_groups.max_num_gen_batches", ("algorithm.max_resample_rounds",),
          "veRL counts generation batches (≤ 0: no limit); ours extra chunks per generator replica per step."),
        M("algorithm.rollout_correction.rollout_is", ("algorithm.name=aipo", "algorithm.mismatch"),
          "`token` truncated IS: AIPO's min(π/μ, ρ) weight (on by default), or `mismatch=tis` under ppo/pg; "
          "`sequence` with rejection of sequences above the cap: `mismatch=mis` (TRL's `sequence_mask`). "
          "veRL's other rejection-sampling modes (`rollout_rs`): not supported."),
        M("algorithm.rollout_correction.rollout_is_threshold", ("algorithm.rho", "algorithm.mismatch_cap"),
          "`rho` for AIPO (veRL 2.0, ours 4.0), `mismatch_cap` for `mismatch=tis|mis` (2.0 in both)."),
        M(A + "policy_loss.loss_mode", ("algorithm.name",),
          "`vanilla` = `ppo` (with `dual_clip_c=3`), `gspo` = `gspo` (veRL always aggregates it "
          "seq-mean-token-mean: ours with `aggregation=sequence_mean`); `sapo`, `gpg`, `clip_cov`, `kl_cov`, "
          "`geo_mean`, `cispo` and the rest: not supported. Ours adds `aipo` (default), `pg`, `clamp`."),
        M(A + "optim.lr", ("algorithm.lr",), "veRL 1e-6, ours 2e-4."),
        M(A + "optim.weight_decay", ("algorithm.weight_decay",), "veRL 0.01, ours 0."),
        M(A + "optim.betas", ("trainer.adam_betas",), ""),
        M(A + "optim.lr_warmup_steps", ("algorithm.lr_warmup_steps",),
          "veRL's -1 uses `lr_warmup_steps_ratio`; ours takes steps only."),
        M(A + "optim.lr_scheduler_type", ("algorithm.lr_schedule",), "`constant`, `cosine`; ours adds `linear`."),
        M(A + "optim.min_lr_ratio", ("algorithm.min_lr_ratio",), ""),
        M(A + "optim.clip_grad", ("algorithm.grad_clip",), "`actor.grad_clip` in older veRL."),
        M(A + "ppo_mini_batch_size", ("algorithm.mini_batches",),
          "veRL gives the size in prompts, ours the count: `mini_batches` = `data.train_batch_size` ÷ "
          "`ppo_mini_batch_size`."),
        M(A + "ppo_micro_batch_size_per_gpu", ("resources.trainer.micro_batch_size",),
          "Sequences per forward/backward per rank."),
        M(A + "use_dynamic_bsz", (), "Micro-batches count sequences, not tokens."),
        M(A + "ppo_epochs", ("algorithm.updates_per_batch",), ""),
        M(A + "clip_ratio", ("algorithm.clip_eps", PPO), "The clipped surrogate is ours with `algorithm.name=ppo`."),
        M(A + "clip_ratio_low", ("algorithm.clip_eps_low", PPO), ""),
        M(A + "clip_ratio_high", ("algorithm.clip_eps_high", PPO), ""),
        M(A + "clip_ratio_c", ("algorithm.dual_clip_c",),
          "Dual-clip PPO: veRL's vanilla loss always applies it (3.0); ours is off unless set, for "
          "`ppo` and `gspo` (veRL's gspo has none)."),
        M(A + "use_kl_loss", ("algorithm.kl_coef",), "false = `kl_coef=0` (our default)."),
        M(A + "kl_loss_coef", ("algorithm.kl_coef",), "veRL 0.001 (when `use_kl_loss`), ours 0."),
        M(A + "kl_loss_type", ("algorithm.kl_estimator",),
          "`kl`/`k1` = `k1`, `mse`/`k2` = `k2`, `low_var_kl`/`k3` = `k3` (default in both; veRL also clamps it "
          "to ±10). `abs`, `full`: not supported."),
        M(A + "entropy_coeff", ("algorithm.entropy_coef",), ""),
        M(A + "loss_agg_mode", ("algorithm.aggregation",),
          "`token-mean` (default in both) = `token_mean`, `seq-mean-token-mean` = `sequence_mean`, "
          "`seq-mean-token-sum-norm` (Dr.GRPO) = `length_norm=constant` (veRL divides by the padded response "
          "length or `loss_scale_factor`, ours by `generation.max_new_tokens`); `token-sum`, `seq-mean-token-sum`: "
          "not supported."),
        M(A + "strategy", ("resources.trainer.strategy",),
          "`fsdp` / `fsdp2` = `fsdp2` (shard group: `resources.trainer.fsdp`); `megatron`: not supported; "
          "ours adds `ddp`."),
        M(A + "fsdp_config.param_offload / optimizer_offload", (),
          "Shard over more ranks instead (`resources.trainer.strategy=fsdp2`); `llamarl plan` prints the "
          "memory per rank."),
        M("actor_rollout_ref.model.enable_gradient_checkpointing", ("resources.trainer.activation_checkpointing",),
          "veRL defaults to true, ours to false."),
        M(R + "name", (), "llamarl generates with its own engine; there is no vLLM/SGLang backend."),
        M(R + "n", ("algorithm.group_size",), ""),
        M(R + "temperature", ("generation.temperature",), ""),
        M(R + "top_p", ("generation.top_p",), ""),
        M(R + "top_k", ("generation.top_k",), "veRL -1 (vLLM) = off; ours 0."),
        M(R + "min_p", ("generation.min_p",), "Not in veRL's rollout YAML: `+" + R + "min_p=...` is passed "
          "to vLLM's SamplingParams; 0 = off in both."),
        M(R + "repetition_penalty", ("generation.repetition_penalty",), "Not in veRL's rollout YAML: `+" + R
          + "repetition_penalty=...` is passed to vLLM's SamplingParams; 1 = off in both."),
        M(R + "tensor_model_parallel_size", ("resources.generator.tp",), ""),
        M(R + "dtype", ("resources.generator.dtype",), ""),
        M(R + "gpu_memory_utilization", (),
          "The KV cache is sized by `resources.generator.max_batch_size` and the lengths; `llamarl plan` "
          "checks that it fits."),
        M("trainer.total_training_steps", ("run.max_steps",), ""),
        M("trainer.total_epochs", (), "Set `run.max_steps` = epochs × rows ÷ `algorithm.prompts_per_step`."),
        M("trainer.save_freq", ("run.checkpoint_every_steps",), "veRL -1 = never; ours 0 = only the final export."),
        M("trainer.max_actor_ckpt_to_keep", ("run.keep_checkpoints",), ""),
        M("trainer.resume_mode / resume_from_path", ("run.resume",),
          "`auto` = `auto`, `disable` = `\"\"`, `resume_path` = the step_<N> path itself."),
        M("trainer.test_freq", ("run.eval_every_steps",), "veRL -1 = never; ours 0."),
        M("trainer.val_before_train", (), "Ours always evaluates before RL (not on resume).", none="always on"),
        M("trainer.default_local_dir", ("run.dir",), ""),
        M("trainer.n_gpus_per_node", ("resources.devices_per_node",), ""),
        M("trainer.nnodes", ("resources.nodes",), ""),
        M("trainer.logger", ("logging.tensorboard", "logging.wandb"), "The console always shows the live view."),
        M("trainer.project_name", ("logging.wandb_project",), ""),
        M("trainer.experiment_name", ("logging.wandb_run_name",), ""),
    ),
)

SOURCES = (TRL, VERL)
