"""Weight-only int8 / fp8 quantization for generation."""
import pytest
import torch

from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.quant import QuantizedLinear, next_token_kl, quantize_model
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, max_seq_len=64)


def test_int8_per_channel_scale_maps_each_rows_max_to_127():
    w = torch.tensor([[0.5, -1.0, 0.25], [2.0, 1.0, -0.5]])
    q = QuantizedLinear(w, "int8")
    # row 0: scale = 1/127, so -1.0 -> -127, 0.5 -> 63.5 -> 64 (round half to even gives 64)
    assert q.q.dtype == torch.int8 and q.q[0].tolist() == [64, -127, 32]
    assert q.q[1].tolist() == [127, 64, -32]  # scale = 2/127: 1.0 -> 63.5 -> 64, -0.5 -> -31.75 -> -32
    x = torch.randn(5, 3)
    # Error per output is bounded by half a quantization step per weight: sum|x| * scale / 2.
    bound = x.abs().sum(1, keepdim=True) * q.scale[None, :] / 2
    assert ((q(x) - x @ w.T).abs() <= bound + 1e-6).all()


@pytest.mark.parametrize("kind,max_kl", [("int8", 1e-3), ("fp8", 1e-2)])
def test_quantized_next_token_distributions_stay_close_to_full_precision(kind, max_kl):
    torch.manual_seed(0)
    model = Llama(ARGS).eval()
    ids = torch.randint(0, 260, (2, 16))
    kl = next_token_kl(model, quantize_model(model, kind), ids)
    assert 0.0 < kl < max_kl


def test_quantized_copies_live_in_the_engine_and_are_rebuilt_only_on_refresh():
    torch.manual_seed(0)
    model = Llama(ARGS).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    engine = GenerationEngine(model, ByteTokenizer(), quantization="int8")
    full = GenerationEngine(Llama(ARGS).eval(), ByteTokenizer())
    full.model.load_state_dict(model.state_dict())
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
    quantized_logprobs = engine.generate([[1, 2, 3]], greedy)[0].logprobs
    assert quantized_logprobs != full.generate([[1, 2, 3]], greedy)[0].logprobs
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # model untouched
    old_q = engine.proj["0.qkv"].q.clone()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-1.0)  # an in-place weight swap, as the runtime does
    engine.generate([[1, 2, 3]], greedy)
    assert torch.equal(engine.proj["0.qkv"].q, old_q)  # stale until refreshed
    engine.refresh_weights()
    assert torch.equal(engine.proj["0.qkv"].q, -old_q)  # symmetric rounding


def test_unknown_quantization_is_rejected():
    with pytest.raises(ValueError, match="quantization"):
        GenerationEngine(Llama(ARGS), ByteTokenizer(), quantization="int4")
