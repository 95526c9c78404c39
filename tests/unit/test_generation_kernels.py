"""The engine's fast CPU kernels compute what the plain ones do.

oneDNN's linear (fused.py) replaces MKL's sgemm from `ONEDNN_MIN_ROWS` rows; the decode step
writes every row's K/V with one flat `index_copy_` at the row's own position (forward.py).
"""
import pytest
import torch
import torch.nn.functional as F

from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.fused import ONEDNN_MIN_ROWS, Proj, onednn_linear_available
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                 max_seq_len=128, rope_theta=10000.0)


@pytest.mark.parametrize("rows", [1, ONEDNN_MIN_ROWS - 1, ONEDNN_MIN_ROWS, 64])
def test_a_projection_equals_f_linear_on_both_sides_of_the_onednn_row_threshold(rows):
    torch.manual_seed(0)
    weight = torch.randn(96, 64).t().contiguous().t()  # [out, in] viewing [in, out] storage
    x = torch.randn(rows, 1, 64)
    proj = Proj(weight, transposed=True)
    with torch.inference_mode():
        got = proj(x)
    uses_onednn = proj.onednn and rows >= ONEDNN_MIN_ROWS
    assert proj.onednn == onednn_linear_available()
    torch.testing.assert_close(got, F.linear(x, weight), atol=2e-5, rtol=1e-5)
    assert got.shape == (rows, 1, 96) and (uses_onednn or torch.equal(got, x @ weight.t()))


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
