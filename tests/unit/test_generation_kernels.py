"""The engine's fast CPU kernels compute what the plain ones do.

Each projection runs by MKL or oneDNN, whichever cpu_gemm.py timed faster for its shape on
this CPU; the decode step writes every row's K/V with one flat `index_copy_` at the row's
own position (forward.py).
"""
import time

import pytest
import torch
import torch.nn.functional as F

from llamarl_core.generation import GenerationEngine, SamplingParams, cpu_gemm
from llamarl_core.generation.fused import Proj
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                 max_seq_len=128, rope_theta=10000.0)


@pytest.fixture
def fresh_choices(monkeypatch):
    monkeypatch.setattr(cpu_gemm, "_choice", {})
    monkeypatch.delenv("LLAMARL_CPU_GEMM", raising=False)


@pytest.mark.parametrize("kernel", ["auto", *cpu_gemm.KERNELS])
@pytest.mark.parametrize("rows", [1, 15, 64])
def test_a_projection_equals_f_linear_whichever_kernel_runs_it(rows, kernel, fresh_choices, monkeypatch):
    monkeypatch.setenv("LLAMARL_CPU_GEMM", kernel)
    torch.manual_seed(0)
    weight, bias, x = torch.randn(96, 64), torch.randn(96), torch.randn(rows, 1, 64)
    with torch.inference_mode():
        first, again = Proj(weight, bias=bias)(x), Proj(weight, bias=bias)(x)  # timed, then chosen
    torch.testing.assert_close(first, F.linear(x, weight, bias), atol=2e-5, rtol=1e-5)
    assert first.shape == (rows, 1, 96) and torch.equal(first, again)


def test_the_first_call_of_a_shape_keeps_the_faster_kernel_and_later_calls_run_only_it(fresh_choices, monkeypatch):
    if not cpu_gemm.onednn_linear_available():
        pytest.skip("oneDNN's linear is not available here")
    calls = []

    def slow_mkl(x, w, b):
        calls.append("mkl")
        time.sleep(0.01)
        return F.linear(x, w, b)

    def onednn(x, w, b):
        calls.append("onednn")
        return F.linear(x, w, b)

    monkeypatch.setattr(cpu_gemm, "RUN", {"mkl": slow_mkl, "onednn": onednn})
    weight, x = torch.randn(512, 256), torch.randn(64, 256)  # 8M MACs: above MIN_TIMED_MACS
    with torch.inference_mode():
        cpu_gemm.linear(x, weight)
        assert sorted(calls) == ["mkl"] * 3 + ["onednn"] * 3  # both timed, alternating
        calls.clear()
        cpu_gemm.linear(x[:40], weight)  # same bucket (33-64 rows): no timing again
        cpu_gemm.linear(x[:16], weight)  # a new bucket is timed on its own
        assert calls[0] == "onednn" and sorted(calls[1:]) == ["mkl"] * 3 + ["onednn"] * 3
        calls.clear()
        cpu_gemm.linear(x[:2], weight)  # 256k MACs: MKL, untimed
    assert calls == ["mkl"] and set(cpu_gemm.choices().values()) == {"onednn"}


def test_gradients_another_dtype_or_a_bad_pin_never_reach_the_choice(fresh_choices, monkeypatch):
    weight = torch.randn(8, 4, requires_grad=True)
    y = cpu_gemm.linear(torch.randn(3, 4), weight)
    y.sum().backward()  # F.linear's autograd: the mkldnn op has none
    assert weight.grad is not None and not cpu_gemm.choices()
    with torch.inference_mode():
        cpu_gemm.linear(torch.randn(3, 4, dtype=torch.float64), weight.detach().double())
    assert not cpu_gemm.choices()
    monkeypatch.setenv("LLAMARL_CPU_GEMM", "blas")
    with pytest.raises(ValueError, match="LLAMARL_CPU_GEMM"), torch.inference_mode():
        cpu_gemm.linear(torch.randn(3, 4), weight.detach())


def test_a_batch_of_64_rows_at_different_positions_decodes_the_full_forwards_argmax():
    torch.manual_seed(0)
    model, tok = Llama(ARGS).eval().requires_grad_(False), ByteTokenizer()
    model.reset_parameters(std=0.2)  # peaked distributions: no near-ties in the argmax
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (int(n),), generator=gen).tolist()
               for n in torch.randint(1, 20, (64,), generator=gen)]
    params = SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True)
    completions = GenerationEngine(model, tok, max_batch_size=64).generate(prompts, params)
    assert len({len(p) for p in prompts}) > 10  # rows write their K/V at many positions
    for prompt, completion in zip(prompts, completions):
        ids = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            argmax = model(ids)[0, len(prompt) - 1:-1].argmax(-1)
        assert argmax.tolist() == completion.token_ids
