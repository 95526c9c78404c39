"""LoRA RL on 2 gloo trainer ranks: DDP and FSDP2 steps reach the adapters of one process, the
FSDP2 sharded-load path (meta build → wrap → materialise → load) starts from the adapters of an
unsharded build, a bf16 LoRA model trains under FSDP2 with a bf16 base and fp32 adapters, an
adapter-only step checkpoint resumes bitwise, and the merged checkpoint gathered from the shards
computes the LoRA model's logits.

One 2-rank run does every scenario; each test asserts its part. The batch's two halves (one per
rank) hold the same number of completion tokens, so the mean of the ranks' token-mean gradients
is the whole batch's."""
import os
from types import SimpleNamespace

import pytest
import torch

from llamarl_core.models import ByteTokenizer, Llama, get_preset, load_pretrained, save_pretrained, with_overrides
from llamarl_core.models.lora import apply_lora, is_adapter
from llamarl_core.wire.rollout import Rollout

WORLD, STEPS, SEED = 2, 2, 11
TARGETS = ["wq", "wv", "w1", "w2"]
LORA = ["model.lora.rank=4", "model.lora.alpha=8", f"model.lora.target_modules=[{','.join(TARGETS)}]"]
COMMON = ["algorithm.group_size=2", "resources.trainer.micro_batch_size=8", "algorithm.kl_coef=0.05",
          "algorithm.lr=3e-3", "algorithm.lr_warmup_steps=0"]


def _args():
    return with_overrides(get_preset("tiny-2m"), dim=32, n_layers=2, n_heads=2, n_kv_heads=2, ffn_dim=64,
                          max_seq_len=32)


def _batch(step: int) -> Rollout:
    g = torch.Generator().manual_seed(100 + step)
    prompt_lens = torch.full((8,), 4)
    completion_lens = torch.tensor([1, 12, 3, 7, 12, 2, 5, 4])  # 23 tokens in each half
    tokens = torch.zeros(8, 16, dtype=torch.long)
    for r in range(8):
        used = int(prompt_lens[r] + completion_lens[r])
        tokens[r, :used] = torch.randint(3, 200, (used,), generator=g)
    behavior = -torch.rand(8, 15, generator=g)
    return Rollout(tokens, prompt_lens, completion_lens, behavior,
                   torch.tensor([1.0, 0, 0, 1, 1, 0, 1, 0]), torch.arange(8) // 2, 0, 0, 0)


def _rows(batch: Rollout, rank: int, world: int) -> Rollout:
    per = batch.num_rows // world
    s = slice(rank * per, (rank + 1) * per)
    return Rollout(batch.tokens[s], batch.prompt_lens[s], batch.completion_lens[s], batch.behavior_logprobs[s],
                   batch.rewards[s], batch.example_ids[s], 0, 0, 0)


def _cfg(ckpt: str, *overrides):
    from llamarl_core.config.load import load_config
    return load_config("cpu_tiny", [f"model.checkpoint={ckpt}", "warmstart.steps=0", *LORA, *COMMON, *overrides])


def _build(cfg, group, rank: int):
    """The trainer's model and learner as the trainer builds them (trainer_model.py)."""
    from llamarl_core.executors.learner import Learner
    from llamarl_core.executors.pipeline import learner_config
    from llamarl_core.executors.trainer_model import build_trainer_model
    world = 1 if group is None else WORLD
    ctx = SimpleNamespace(role="trainer", groups={"trainer": group}, device="cpu", local_rank=rank,
                          ranks=lambda role: list(range(world)))
    model, raw, _ = build_trainer_model(ctx, cfg.model, cfg.resources.trainer, cfg.run.seed)
    return model, raw, Learner(model, learner_config(cfg), data_parallel=world > 1)


def _train(learner, rank: int, world: int, steps: range) -> list[float]:
    from llamarl_core.executors.train_step import train_on
    return [train_on(learner, _rows(_batch(s), rank, world), torch.zeros(8 // world))["loss"] for s in steps]


def _adapters(model, strategy: str) -> dict:
    from llamarl_core.transport.parallel import full_state
    return {n: t.clone() for n, t in full_state(model, strategy).items() if is_adapter(n)}


def _body(rank, world_size, store, ckpt, run_dir):
    import torch.distributed as dist

    from llamarl_core.checkpoint import checkpoints
    from llamarl_core.models.lora import lora_scales, merge_adapters
    from llamarl_core.models import save_streamed
    from llamarl_core.transport.parallel import iter_full_tensors, unwrap

    group, out = dist.group.WORLD, {}
    for strategy in ("ddp", "fsdp2"):  # fsdp2 sharded over 2 ranks, from a checkpoint: the sharded-load path
        cfg = _cfg(ckpt, f"resources.trainer.strategy={strategy}", "resources.trainer.num_devices=2", "resources.trainer.fsdp=0")
        model, raw, learner = _build(cfg, group, rank)
        out[f"{strategy}_start"] = _adapters(model, strategy)
        out[f"{strategy}_losses"] = _train(learner, rank, world_size, range(STEPS))
        out[strategy] = _adapters(model, strategy)
    # merged HF checkpoint gathered one tensor at a time from the FSDP2 shards (trainer.checkpoint)
    shapes = {n: tuple(p.shape) for n, p in raw.named_parameters() if not is_adapter(n)}
    tensors = iter_full_tensors(model, keep=rank == 0)
    if rank == 0:
        save_streamed(merge_adapters(tensors, lora_scales(raw)), shapes, torch.float32, raw.args, ByteTokenizer(),
                      os.path.join(run_dir, "merged"))
    else:
        for _ in tensors:
            pass
    out["merged_adapters"] = out["fsdp2"]
    # exact resume under FSDP2: step 1, checkpoint (adapters + Adam), step 2 | fresh build, load, step 2
    cfg = _cfg(ckpt, "resources.trainer.strategy=fsdp2", "resources.trainer.num_devices=2", "resources.trainer.fsdp=0")
    model, raw, learner = _build(cfg, group, rank)
    _train(learner, rank, world_size, range(1))
    path = os.path.join(run_dir, "checkpoints", "step_1")
    checkpoints.save(path, model, learner.optimizer, group, rank, {"step": 1, "lr_steps": learner.steps_done},
                     keep=3, run_dir=run_dir)
    out["whole_loss"] = _train(learner, rank, world_size, range(1, 2))
    out["whole"] = _adapters(model, "fsdp2")
    model, raw, learner = _build(cfg, group, rank)
    state = checkpoints.load(path, model, learner.optimizer, group, rank)
    learner.steps_done = state["lr_steps"]
    out["resumed_loss"] = _train(learner, rank, world_size, range(1, 2))
    out["resumed"] = _adapters(model, "fsdp2")
    out["state"] = state
    # a full (no LoRA) checkpoint of the same model, for its size
    full_cfg = _cfg(ckpt, "resources.trainer.strategy=fsdp2", "resources.trainer.num_devices=2", "resources.trainer.fsdp=0", "model.lora.rank=0")
    model, raw, learner = _build(full_cfg, group, rank)
    checkpoints.save(os.path.join(run_dir, "full", "checkpoints", "step_1"), model, learner.optimizer, group, rank,
                     {"step": 1}, keep=3, run_dir=os.path.join(run_dir, "full"))
    # bf16 compute under FSDP2: bf16 frozen base, fp32 adapters in one FSDP unit, and a step trains
    cfg = _cfg(ckpt, "resources.trainer.strategy=fsdp2", "resources.trainer.num_devices=2", "resources.trainer.fsdp=0",
               "resources.trainer.dtype=bfloat16")
    model, raw, learner = _build(cfg, group, rank)
    out["bf16_dtypes"] = {n: p.dtype for n, p in raw.named_parameters()}
    start = _adapters(model, "fsdp2")
    out["bf16_losses"] = _train(learner, rank, world_size, range(1))
    out["bf16_moved"] = [n for n, t in _adapters(model, "fsdp2").items() if not torch.equal(t, start[n])]
    dist.barrier()
    return out


@pytest.fixture(scope="module")
def results(run_workers, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora_train")
    torch.manual_seed(5)
    save_pretrained(Llama(_args()), ByteTokenizer(), tmp / "base")
    out = run_workers(_body, WORLD, str(tmp / "base"), str(tmp / "run"), timeout_s=300)
    # one process, the whole batch each step, from the same checkpoint and seed
    cfg = _cfg(str(tmp / "base"))
    model, _, learner = _build(cfg, None, 0)
    single = {"start": _adapters(model, "ddp")}
    single["losses"] = _train(learner, 0, 1, range(STEPS))
    single["end"] = _adapters(model, "ddp")
    single["model"] = model
    return tmp, out, single


def test_ddp_and_fsdp2_lora_steps_reach_the_adapters_of_one_process(results):
    _, out, single = results
    assert single["end"].keys() == {n for n, _ in single["model"].named_parameters() if is_adapter(n)}
    for strategy in ("ddp", "fsdp2"):
        for rank in range(WORLD):
            for n, want in single["end"].items():
                torch.testing.assert_close(out[rank][strategy][n], want, rtol=1e-4, atol=1e-6, msg=f"{strategy} {n}")
                assert not torch.equal(want, single["start"][n]) or n.endswith("lora_A.weight")


def test_the_sharded_load_path_starts_from_the_adapters_of_an_unsharded_build(results):
    _, out, single = results
    for strategy in ("ddp", "fsdp2"):
        for rank in range(WORLD):
            for n, want in single["start"].items():
                assert torch.equal(out[rank][f"{strategy}_start"][n], want), (strategy, n)
    # and those are apply_lora's draw from run.seed on the unsharded model
    from llamarl_core.config.load import load_config
    seed = load_config("cpu_tiny", []).run.seed
    drawn = apply_lora(Llama(_args()), 4, 2.0, TARGETS, seed=seed)
    for n, p in drawn.named_parameters():
        if is_adapter(n):
            assert torch.equal(single["start"][n], p.detach()), n


def test_an_adapter_only_checkpoint_resumes_bitwise_and_is_smaller_than_a_full_one(results):
    tmp, out, _ = results
    for rank in range(WORLD):
        assert out[rank]["resumed_loss"] == out[rank]["whole_loss"]
        for n, t in out[rank]["whole"].items():
            assert torch.equal(out[rank]["resumed"][n], t), n
    assert out[0]["state"]["lora"] == {"rank": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": TARGETS}

    lora, full = (_stored(tmp / "run" / sub / "checkpoints" / "step_1" / "trainer") for sub in ("", "full"))
    adapters = {f"model.{n}" for n in out[0]["whole"]}
    assert {k for k in lora if k.startswith("model.")} == adapters  # no base weight
    assert {"model.tok_embeddings.weight", "model.layers.0.attention.wq.weight"} <= set(full)  # the base's
    assert sum(lora.values()) < sum(full.values()) / 10, (sum(lora.values()), sum(full.values()))


def _stored(path) -> dict[str, int]:
    """Tensor name -> bytes, from a DCP checkpoint's metadata (our own test file)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    meta = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    return {k: v.size.numel() * torch.empty((), dtype=v.properties.dtype).element_size()
            for k, v in meta.items() if isinstance(v, TensorStorageMetadata)}


def test_the_merged_checkpoint_of_the_sharded_lora_model_computes_its_logits(results):
    tmp, out, single = results
    loaded, _ = load_pretrained(tmp / "run" / "merged")
    assert not any("lora" in n for n, _ in loaded.named_parameters())
    lora = single["model"]  # the 1-process model, adapters set to the FSDP2 run's
    with torch.no_grad():
        params = dict(lora.named_parameters())
        for n, t in out[0]["merged_adapters"].items():
            params[n].copy_(t)
        tokens = _batch(0).tokens
        torch.testing.assert_close(loaded(tokens), lora(tokens), rtol=1e-5, atol=1e-5)


def test_bf16_lora_under_fsdp2_holds_a_bf16_base_and_fp32_adapters_and_trains(results):
    _, out, single = results
    for rank in range(WORLD):
        dtypes = out[rank]["bf16_dtypes"]
        assert all(d == (torch.float32 if is_adapter(n) else torch.bfloat16) for n, d in dtypes.items()), dtypes
        assert all(torch.isfinite(torch.tensor(x)) for x in out[rank]["bf16_losses"])
        assert set(out[rank]["bf16_moved"]) == {n for n in single["end"] if n.endswith("lora_B.weight")}
