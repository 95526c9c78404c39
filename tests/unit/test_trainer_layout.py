"""Single-process parts of the trainer layout (transport/parallel.py): checkpointing, autocast."""
import torch

from llamarl_core.models import Llama
from llamarl_core.models.args import BYTE_VOCAB_SIZE, ModelArgs
from llamarl_core.transport.parallel import apply_activation_checkpointing, wrap_data_parallel

ARGS = ModelArgs(vocab_size=BYTE_VOCAB_SIZE, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                 ffn_dim=64, rope_theta=10000.0, max_seq_len=64)


def _model() -> Llama:
    torch.manual_seed(0)
    return Llama(ARGS)


def _grads(model, tokens) -> dict:
    logits = model(tokens)[:, :-1]
    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_activation_checkpointing_gives_the_same_gradients_and_parameter_names():
    tokens = torch.randint(0, BYTE_VOCAB_SIZE, (3, 10), generator=torch.Generator().manual_seed(2))
    plain = _grads(_model(), tokens)
    checkpointed = apply_activation_checkpointing(_model())
    got = _grads(checkpointed, tokens)
    assert list(got) == list(plain)  # weight sync and checkpoints address parameters by name
    for name in plain:
        torch.testing.assert_close(got[name], plain[name], rtol=0, atol=1e-7, msg=name)


def test_a_checkpointed_model_still_runs_inference():
    tokens = torch.randint(0, BYTE_VOCAB_SIZE, (2, 6), generator=torch.Generator().manual_seed(3))
    plain, checkpointed = _model(), apply_activation_checkpointing(_model())
    with torch.inference_mode():
        assert torch.equal(checkpointed(tokens), plain(tokens))


def test_bf16_compute_without_fsdp_keeps_fp32_weights_and_runs_the_forward_in_bf16():
    model = wrap_data_parallel(_model(), None, "ddp", compute_dtype=torch.bfloat16)
    seen = []
    model.layers[0].feed_forward.w1.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    tokens = torch.randint(0, BYTE_VOCAB_SIZE, (2, 6), generator=torch.Generator().manual_seed(4))
    out = model(tokens)
    assert seen == [torch.bfloat16]
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    torch.testing.assert_close(out, _model()(tokens), rtol=0, atol=0.05)  # bf16 rounding only
