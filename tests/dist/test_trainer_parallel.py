"""CPU twins of the GPU trainer layouts (gloo, 4 ranks): HSDP, checkpointing, sharded load.

One 4-rank run (processes cost seconds here) does every scenario; each test asserts its part:
- HSDP 2 x 2 (dp_replicate x dp_shard) with activation checkpointing, 3 AdamW steps on a
  global batch split over the 4 ranks, ends at the weights of one process that trains the
  plain model on the whole batch (every rank's loss is a mean over the same number of tokens,
  so the mean of the 4 gradients is the full-batch gradient);
- a model built on the meta device, sharded 2 x 2 and loaded from HF safetensors rank by rank
  holds exactly the checkpoint's weights, and each rank stores only its shard;
- bf16 compute under FSDP2 keeps fp32 master parameters and gradients;
- greedy decoding through the sharded model (the held-out eval at 70B/405B, no rank gathers
  it) gives the tokens, texts and finish reasons of the engine on the full weights;
- the same sharded load for Qwen2.5 (1-D q/k/v biases) and Qwen3 (q/k norms, head_dim != dim /
  heads) checkpoints saved by transformers, and their step checkpoint (DCP, sharded 2 x 2 as
  trained) read back by `load_pretrained` as the same model;
- the KL reference (algorithm.kl_coef > 0) is laid out exactly like the HSDP trainer: the same
  mesh, placements and local shards, in the compute dtype, with no gradients, and it computes
  the trainer's logits.
"""
from pathlib import Path

import pytest
import torch

from llamarl_core.models import ByteTokenizer, Llama, load_pretrained, save_pretrained
from llamarl_core.models.args import BYTE_VOCAB_SIZE, ModelArgs

ARGS = ModelArgs(vocab_size=BYTE_VOCAB_SIZE, dim=32, n_layers=3, n_heads=4, n_kv_heads=2,
                 ffn_dim=72, rope_theta=10000.0, max_seq_len=64)
WORLD, DP, STEPS, ROWS, SEQ = 4, 2, 3, 8, 12


def _model() -> Llama:
    torch.manual_seed(0)
    return Llama(ARGS)


def _batch() -> torch.Tensor:
    return torch.randint(0, BYTE_VOCAB_SIZE, (ROWS, SEQ), generator=torch.Generator().manual_seed(1))


def _train(model, rows: torch.Tensor, steps: int = STEPS) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    for _ in range(steps):
        logits = model(rows)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


PROMPTS = [list(b"12+34="), list(b"7+8="), list(b"100+2000=")]  # uneven lengths: left padding


def _greedy(max_new_tokens: int, stop: str):
    from llamarl_core.generation.params import SamplingParams
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0,
                          stop_strings=(stop,) if stop else ())


def _watch_units(model) -> dict:
    """Whether the embedding and the head are gathered (plain tensors, not DTensor shards)
    while the middle block runs forward and backward."""
    from torch.distributed.tensor import DTensor
    seen = {"forward": set(), "backward": set()}

    def note(phase):
        seen[phase].update(n for n, m in (("tok_embeddings", model.tok_embeddings), ("output", model.output))
                           if not isinstance(m.weight, DTensor))

    def on_output(module, args, output):
        note("forward")
        if output.requires_grad:
            output.register_hook(lambda grad: note("backward"))  # the middle block's backward starts
    model.layers[1].register_forward_hook(on_output)
    return seen


def _body(rank, world_size, store, ckpt_dir, stop, families):
    import torch.distributed as dist

    from llamarl_core.models import build_empty
    from llamarl_core.transport.parallel import full_state, wrap_data_parallel
    from llamarl_core.transport.sharded_load import load_sharded, materialize

    group = dist.group.WORLD
    out = {}
    # 1. HSDP 2 x 2 + activation checkpointing, 3 steps on this rank's quarter of the batch.
    model = wrap_data_parallel(_model(), group, "fsdp2", dp=DP, activation_checkpointing=True)
    mesh = model.tok_embeddings.weight.device_mesh
    out["mesh"] = (mesh.mesh.tolist(), mesh.mesh_dim_names)
    per = ROWS // world_size
    gathered = _watch_units(model)
    _train(model, _batch()[rank * per:(rank + 1) * per])
    out["units"] = gathered
    out["hsdp"] = full_state(model, "fsdp2")
    # 1b. The KL reference of that trainer: sharded like it, frozen, equal to it.
    from llamarl_core.executors.trainer_model import build_reference_model
    ref = build_reference_model(model, "cpu", torch.bfloat16)
    trained = dict(model.named_parameters())
    out["ref_layout"] = [(n, p.device_mesh == trained[n].device_mesh, p.placements == trained[n].placements,
                          p.to_local().shape == trained[n].to_local().shape, p.dtype, p.requires_grad)
                         for n, p in ref.named_parameters()]
    with torch.no_grad():  # in the trainer's own dtype the reference computes its logits exactly
        out["ref_logits"] = build_reference_model(model, "cpu", torch.float32)(_batch())
        out["trained_logits"] = model(_batch())
    # 2. Meta-device model, sharded 2 x 2, loaded from safetensors into each rank's shard.
    meta, _ = build_empty(ckpt_dir, device="meta")
    wrap_data_parallel(meta, group, "fsdp2", dp=DP)
    materialize(meta, "cpu")
    out["held_bytes"] = load_sharded(meta, ckpt_dir)
    out["loaded"] = full_state(meta, "fsdp2")
    # 3. bf16 compute, fp32 master weights and gradients.
    mixed = wrap_data_parallel(_model(), group, "fsdp2", dp=DP, compute_dtype=torch.bfloat16)
    _train(mixed, _batch()[rank * per:(rank + 1) * per], steps=1)
    out["mixed_dtypes"] = sorted({str(p.dtype) for p in mixed.parameters()})
    # 4. Greedy decoding through the sharded (2 x 2) loaded model, every rank in lockstep.
    from llamarl_core.eval.sharded_eval import LockstepGreedy
    engine = LockstepGreedy(meta, ByteTokenizer(), group, "cpu", torch.float32)
    out["greedy"] = [[(c.token_ids, c.text, c.finish_reason) for c in engine.generate(PROMPTS, _greedy(12, s))]
                     for s in ("", stop)]
    _train(meta, _batch()[rank * per:(rank + 1) * per], steps=1)  # training goes on after an eval
    # 5. Other families: sharded load, then a step checkpoint as the trainer writes it.
    from llamarl_core.checkpoint import checkpoints
    from llamarl_core.models import load_tokenizer, save_model_files
    for family, (hf_dir, step_dir) in families.items():
        model, _ = build_empty(hf_dir, device="meta")
        wrap_data_parallel(model, group, "fsdp2", dp=DP)
        materialize(model, "cpu")
        load_sharded(model, hf_dir)
        out[family] = full_state(model, "fsdp2")
        if rank == 0:
            save_model_files(step_dir, model.args, load_tokenizer(hf_dir), torch.float32)
        opt = torch.optim.AdamW(model.parameters())
        checkpoints.save(step_dir, model, opt, group, rank, {"step": 1}, keep=2, run_dir=str(Path(step_dir).parents[1]))
    return out


@pytest.fixture(scope="module")
def results(run_workers, tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(5)
    save_pretrained(Llama(ARGS), ByteTokenizer(), ckpt)
    stop = _engine_greedy(str(ckpt), "")[0][1][2]  # a character row 0 really produces
    from hf_tiny import save_tiny
    families = {f: (str(save_tiny(f, ckpt.parent / f)), str(ckpt.parent / f"run_{f}" / "checkpoints" / "step_1"))
                for f in ("qwen2.5", "qwen3")}
    return str(ckpt), run_workers(_body, WORLD, str(ckpt), stop, families, timeout_s=300), stop, families


def _engine_greedy(ckpt: str, stop: str):
    from llamarl_core.generation.engine import GenerationEngine
    model, tok = load_pretrained(ckpt)
    return [(c.token_ids, c.text, c.finish_reason)
            for c in GenerationEngine(model, tok, max_batch_size=8).generate(PROMPTS, _greedy(12, stop))]


def test_hsdp_mesh_puts_consecutive_ranks_in_one_shard_group(results):
    _, out, _, _ = results
    assert out[0]["mesh"] == ([[0, 1], [2, 3]], ("dp_replicate", "dp_shard"))


def test_hsdp_two_by_two_with_checkpointing_trains_to_the_single_process_weights(results):
    _, out, _, _ = results
    reference = _model()
    _train(reference, _batch())
    for rank in range(WORLD):
        for name, p in reference.named_parameters():
            torch.testing.assert_close(out[rank]["hsdp"][name], p.detach(), rtol=0, atol=1e-5, msg=name)


def test_embedding_and_head_are_fsdp_units_of_their_own_not_gathered_in_the_middle_blocks(results):
    # Fails before the fix: they belonged to the root unit, gathered through forward and backward.
    for rank in results[1]:
        assert rank["units"] == {"forward": set(), "backward": set()}, rank["units"]


def test_meta_device_sharded_load_equals_a_full_load(results):
    ckpt, out, _, _ = results
    full, _ = load_pretrained(ckpt)
    total = sum(p.numel() * p.element_size() for p in full.parameters())
    for rank in range(WORLD):
        for name, p in full.named_parameters():
            assert torch.equal(out[rank]["loaded"][name], p.detach()), name
        assert out[rank]["held_bytes"] <= total / 2 + 4096  # one of 2 shards (+ uneven-row slack)
    assert sum(out[r]["held_bytes"] for r in (0, 1)) == total  # one replica's shards are the model


def test_the_kl_reference_is_sharded_exactly_like_the_trainer_and_computes_its_logits(results):
    _, out, _, _ = results
    names = {n for n, _ in _model().named_parameters()}
    for rank in range(WORLD):
        layout = out[rank]["ref_layout"]
        assert {n for n, *_ in layout} == names
        # same mesh, same placements, same local shard: no rank holds more of the reference
        # than of the trained weights; stored in bf16, no gradient
        assert all(same_mesh and same_place and same_shape and dtype == torch.bfloat16 and not grad
                   for _, same_mesh, same_place, same_shape, dtype, grad in layout)
        torch.testing.assert_close(out[rank]["ref_logits"], out[rank]["trained_logits"], rtol=0, atol=0)


def test_bf16_compute_under_fsdp2_keeps_fp32_master_weights(results):
    _, out, _, _ = results
    assert all(o["mixed_dtypes"] == ["torch.float32"] for o in out)


def test_greedy_decoding_through_the_sharded_model_matches_the_engine_on_full_weights(results):
    ckpt, out, stop, _ = results
    want = [_engine_greedy(ckpt, ""), _engine_greedy(ckpt, stop)]
    assert any(r[2] == "stop" for r in want[1])  # the stop string is really exercised
    for rank in range(WORLD):
        for got, expected in zip(out[rank]["greedy"], want):
            assert [(t, x, f) for t, x, f in got] == [(t, x, f) for t, x, f in expected]


@pytest.mark.parametrize("family", ["qwen2.5", "qwen3"])
def test_biases_and_qk_norms_load_sharded_and_their_step_checkpoint_is_the_same_model(results, family):
    _, out, _, families = results
    hf_dir, step_dir = families[family]
    full, _ = load_pretrained(hf_dir)
    from_step, _ = load_pretrained(step_dir)  # DCP chunks of 2 shards, 2 replicas
    names = {n for n, _ in full.named_parameters()}
    assert any(n.endswith(".bias") for n in names) or any("q_norm" in n for n in names)
    for name, p in full.named_parameters():
        for rank in range(WORLD):
            assert torch.equal(out[rank][family][name], p.detach()), name
        assert torch.equal(dict(from_step.named_parameters())[name], p.detach()), name
