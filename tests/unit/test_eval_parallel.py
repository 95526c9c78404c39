"""Data-parallel eval: two torchrun replicas return exactly what one process returns."""
import torch

from llamarl_core.data import arith_examples
from llamarl_core.eval.parallel import generate_on_replicas
from llamarl_core.models import ByteTokenizer, Llama, get_preset, save_pretrained, with_overrides


def test_two_replicas_generate_the_same_completions_as_one_process(tmp_path):
    torch.manual_seed(0)
    args = with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2,
                          ffn_dim=64, max_seq_len=64)
    save_pretrained(Llama(args), ByteTokenizer(), tmp_path)
    examples = arith_examples("test", 3, seed=0)
    # 2 examples per batch (max_batch_size 4 // 2 samples): batch 0 -> rank 0, batch 1 -> rank 1
    spec = {"checkpoint": str(tmp_path), "dtype": "float32", "quantization": "none",
            "max_batch_size": 4, "world_size": 1, "device": "cpu", "threads": 1,
            "template": "plain", "n_samples": 2, "temperature": 1.0, "top_p": 1.0,
            "max_new_tokens": 3, "stop_strings": [], "seed": 5}
    one = generate_on_replicas(spec, examples)
    two = generate_on_replicas({**spec, "world_size": 2}, examples)
    assert [p["index"] for p in two] == [0, 1, 2]
    assert two == one
