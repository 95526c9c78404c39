"""fp8 (e4m3, per-channel scales) generation on CUDA; skipped on machines without a GPU."""
import pytest
import torch

from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.quant import next_token_kl, quantize_model
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

ARGS = ModelArgs(vocab_size=260, dim=128, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=256, max_seq_len=128)


def _model():
    torch.manual_seed(0)
    return Llama(ARGS).to("cuda", torch.bfloat16).eval()


def test_fp8_linears_use_scaled_mm_on_hopper_and_stay_close_to_bf16():
    model = _model()
    quantized = quantize_model(model, "fp8")
    layer = quantized["layers.0.attention.wq"]
    assert layer.q.dtype == torch.float8_e4m3fn
    if torch.cuda.get_device_capability()[0] >= 9:
        assert layer.use_scaled_mm
    ids = torch.randint(0, 260, (4, 32), device="cuda")
    assert next_token_kl(model, quantized, ids) < 2e-2


def test_fp8_engine_generates_with_logprobs_on_cuda():
    engine = GenerationEngine(_model(), ByteTokenizer(), quantization="fp8")
    out = engine.generate([[1, 2, 3], [4, 5]], SamplingParams(max_new_tokens=8, ignore_eos=True), seed=0)
    assert [len(c.token_ids) for c in out] == [8, 8]
    assert all(lp <= 0.0 for c in out for lp in c.logprobs)
