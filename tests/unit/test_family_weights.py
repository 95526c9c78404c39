"""Everything that moves weights, for the families with extra tensors: Qwen2's 1-D q/k/v biases
and Qwen3's per-head q/k norms (with head_dim != dim / heads). Generator TP slices (a bias
splits with its column-parallel weight, q/k norms stay whole), the DDMA plan moving every byte
of them, the simulator counting the same bytes, the per-slice checksums, and a run's step
checkpoint read back as a model (safely)."""
import json
import pickle

import pytest
import torch

from llamarl_core.models import ByteTokenizer, Llama, ModelArgs, load_pretrained, save_model_files
from llamarl_core.models.tp_slices import tp_slice
from llamarl_core.sim.ddma_bytes import link_bytes
from llamarl_core.transport.checksums import weights_sha256
from llamarl_core.transport.ddma_plan import build_plan, dst_block, fsdp_rows, src_block, tensor_view
from llamarl_core.transport.tensor_parallel import shard_model_
from llamarl_core.transport.tp_layout import shard_state, take

pytestmark = [pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
              pytest.mark.usefixtures("one_torch_thread")]

QWEN2 = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64,
                  family="qwen2", qkv_bias=True)
QWEN3 = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64,
                  family="qwen3", qk_norm=True, decoupled_head_dim=16)
FAMILY_ARGS = {"qwen2": QWEN2, "qwen3": QWEN3}




def _model(args: ModelArgs) -> Llama:
    """Random weights, biases and norms (the module's init zeroes biases and sets norms to 1)."""
    torch.manual_seed(0)
    model = Llama(args)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape))
    return model


@pytest.mark.parametrize("tp", [2, 4])  # 4 > 2 KV heads: each KV head (and its bias) replicated
def test_a_bias_splits_with_the_rows_of_its_column_parallel_weight(tp):
    full = _model(QWEN2)
    state = {n: p.detach().clone() for n, p in full.named_parameters()}
    for rank in range(tp):
        sharded = shard_model_(_model(QWEN2), rank, tp, group=None)
        for proj in ("wq", "wk", "wv"):
            lin = getattr(sharded.layers[1].attention, proj)
            s = tp_slice(f"layers.1.attention.{proj}.weight", tuple(state[f"layers.1.attention.{proj}.weight"].shape),
                         QWEN2, rank, tp)
            assert torch.equal(lin.weight, take(state[f"layers.1.attention.{proj}.weight"], s))
            assert torch.equal(lin.bias, state[f"layers.1.attention.{proj}.bias"][s.start:s.stop])
            assert lin.bias.shape[0] == lin.weight.shape[0] < state[f"layers.1.attention.{proj}.weight"].shape[0]
        held = {n: p.detach() for n, p in sharded.named_parameters()}
        assert weights_sha256(held) == weights_sha256(shard_state(state, QWEN2, rank, tp))  # checksum rule


def test_q_and_k_norms_are_whole_on_every_tp_rank():
    full = _model(QWEN3)
    for rank in range(2):
        sharded = shard_model_(_model(QWEN3), rank, 2, group=None)
        a, ref = sharded.layers[0].attention, full.layers[0].attention
        assert torch.equal(a.q_norm.weight, ref.q_norm.weight) and torch.equal(a.k_norm.weight, ref.k_norm.weight)
        assert a.wq.weight.shape == (2 * 16, 32) and a.wo.weight.shape == (32, 2 * 16)  # head_dim 16 of 2 heads
        state = {n: p.detach() for n, p in full.named_parameters()}
        assert weights_sha256({n: p.detach() for n, p in sharded.named_parameters()}) == \
            weights_sha256(shard_state(state, QWEN3, rank, 2))


@pytest.mark.parametrize("family", list(FAMILY_ARGS))
@pytest.mark.parametrize("T,G,tp", [(2, 2, 2), (3, 2, 1)])
def test_the_ddma_plan_delivers_every_bias_and_norm_byte_into_each_generator_slice(family, T, G, tp):
    args = FAMILY_ARGS[family]
    full = {n: p.detach() for n, p in _model(args).named_parameters()}
    plan = build_plan({n: (tuple(t.shape), t.dtype) for n, t in full.items()}, trainer_ranks=T,
                      generator_ranks=G, tp_size=tp, args=args, max_piece_bytes=64)
    for g in range(G):
        slot = torch.full((plan.slot_nbytes[g],), 255, dtype=torch.uint8)
        views = {t.name: tensor_view(slot, t, torch.float32) for t in plan.slots[g]}
        for p in (p for p in plan.pieces if p.generator == g):
            lo, hi = fsdp_rows(full[p.name].shape[0], T, p.trainer)
            dst_block(views[p.name], p).copy_(src_block(full[p.name][lo:hi], p))
        assert views.keys() == full.keys()
        for name, t in full.items():
            assert torch.equal(views[name], take(t, tp_slice(name, tuple(t.shape), args, g % tp, tp))), name
    b = link_bytes(args, trainer_ranks=T, generator_ranks=G, tp=tp, bytes_per_elem=4)
    assert b["send_per_trainer_rank"] == [sum(plan.link_nbytes(t, g) for g in range(G)) for t in range(T)]


def _step_checkpoint(tmp_path, args):
    """What a trainer writes at step 3 (checkpoint/checkpoints.py + trainer.save_checkpoint),
    from one process: DCP model + optimizer shards, RNG, state.json, STABLE, config.json."""
    from llamarl_core.checkpoint import checkpoints

    model = _model(args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 260, (2, 8))).mean().backward()
    opt.step()
    path = tmp_path / "run" / "checkpoints" / "step_3"
    save_model_files(path, args, ByteTokenizer(), torch.float32)
    checkpoints.save(str(path), model, opt, None, 0, {"step": 3}, keep=2, run_dir=str(tmp_path / "run"))
    return model, path


@pytest.mark.parametrize("family", list(FAMILY_ARGS))
def test_a_step_checkpoint_loads_as_a_model(tmp_path, family):
    model, path = _step_checkpoint(tmp_path, FAMILY_ARGS[family])
    assert not list(path.glob("*.safetensors"))  # the weights are only the DCP shards
    loaded, tokenizer = load_pretrained(path)
    assert isinstance(tokenizer, ByteTokenizer) and loaded.args == model.args
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_llamarl_eval_reads_a_step_checkpoint(tmp_path, capsys):
    from llamarl_cli.main import main

    _, path = _step_checkpoint(tmp_path, QWEN2)
    code = main(["eval", f"checkpoint={path}", "data=arith", "num_examples=2", "max_new_tokens=3",
                 f"eval.out={tmp_path / 'eval'}", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["n_examples"] == 2


class _Planted:
    def __reduce__(self):
        import os
        return (os.system, ("touch planted",))


def test_a_planted_pickle_in_the_metadata_is_refused_without_running(tmp_path, monkeypatch):
    _, path = _step_checkpoint(tmp_path, QWEN2)
    (path / "trainer" / ".metadata").write_bytes(pickle.dumps(_Planted()))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="refused to load posix.system"):
        load_pretrained(path)
    assert not (tmp_path / "planted").exists()


def test_a_missing_step_shard_is_named(tmp_path):
    _, path = _step_checkpoint(tmp_path, QWEN3)
    shard = next((path / "trainer").glob("*.distcp"))
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=shard.name):
        load_pretrained(path)
