"""Checkpoint files: sharding round trip and clear errors for broken checkpoints."""
import json

import pytest
import torch

from llamarl_core.models import ByteTokenizer, Llama, ModelArgs, load_pretrained, save_pretrained

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64)


@pytest.fixture
def sharded(tmp_path):
    torch.manual_seed(0)
    model = Llama(ARGS)
    # Largest tensor is 260*32*4 B = 33,280 B; a 40 kB limit forces several shards.
    save_pretrained(model, ByteTokenizer(), tmp_path, max_shard_bytes=40_000)
    return model, tmp_path


def test_sharded_checkpoint_has_an_index_and_round_trips_exactly(sharded):
    model, path = sharded
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    loaded, tokenizer = load_pretrained(path)
    assert isinstance(tokenizer, ByteTokenizer) and loaded.args == model.args
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_missing_shard_is_named_in_the_error(sharded):
    _, path = sharded
    shard = sorted(path.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=shard.name):
        load_pretrained(path)


def test_corrupt_shard_is_named_in_the_error(sharded):
    _, path = sharded
    shard = sorted(path.glob("model-*.safetensors"))[0]
    shard.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match=f"{shard.name} is corrupt"):
        load_pretrained(path)


def test_missing_tensor_is_reported_by_its_hugging_face_name(tmp_path):
    from safetensors.torch import load_file, save_file

    save_pretrained(Llama(ARGS), ByteTokenizer(), tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(KeyError, match="model.layers.1.mlp.up_proj.weight"):
        load_pretrained(tmp_path)


def test_shape_mismatch_names_tensor_file_and_both_shapes(tmp_path):
    save_pretrained(Llama(ARGS), ByteTokenizer(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["intermediate_size"] = 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    # The first mismatching MLP tensor read is named with its file and both shapes.
    expected = r"model.safetensors: tensor .model.layers.0.mlp.\w+_proj.weight. has shape \(\d+, \d+\)"
    with pytest.raises(ValueError, match=expected + ", config.json implies"):
        load_pretrained(tmp_path)


def test_missing_config_field_is_named(tmp_path):
    save_pretrained(Llama(ARGS), ByteTokenizer(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(KeyError, match="num_hidden_layers"):
        load_pretrained(tmp_path)


def test_load_pretrained_casts_to_the_requested_dtype(tmp_path):
    save_pretrained(Llama(ARGS), ByteTokenizer(), tmp_path)
    model, _ = load_pretrained(tmp_path, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model(torch.tensor([[1, 2, 3]])).shape == (1, 3, 260)


def test_legacy_pytorch_bin_checkpoint_loads_through_weights_only(tmp_path):
    from llamarl_core.models.checkpoint import ours_to_hf

    model = Llama(ARGS)
    save_pretrained(model, ByteTokenizer(), tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save({ours_to_hf(n): p.detach() for n, p in model.named_parameters()},
               tmp_path / "pytorch_model.bin")
    loaded, _ = load_pretrained(tmp_path)
    assert torch.equal(loaded.layers[1].feed_forward.w3.weight, model.layers[1].feed_forward.w3.weight)


def test_a_streamed_save_writes_the_same_files_as_a_plain_save(tmp_path):
    from llamarl_core.models import save_streamed
    torch.manual_seed(0)
    model = Llama(ARGS)
    params = list(model.named_parameters())

    def one_at_a_time():  # as FSDP2 gathers: a tensor exists only once it is asked for
        for n, p in params:
            yield n, p.detach().clone()

    save_streamed(one_at_a_time(), {n: tuple(p.shape) for n, p in params}, torch.float32, ARGS,
                  ByteTokenizer(), tmp_path / "streamed", max_shard_bytes=40_000)
    save_pretrained(model, ByteTokenizer(), tmp_path / "plain", max_shard_bytes=40_000)
    for f in sorted(p.name for p in (tmp_path / "plain").iterdir()):
        assert (tmp_path / "streamed" / f).read_bytes() == (tmp_path / "plain" / f).read_bytes(), f
    index = json.loads((tmp_path / "streamed" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1


def test_a_streamed_save_refuses_tensors_out_of_order(tmp_path):
    from llamarl_core.models import save_streamed
    params = list(Llama(ARGS).named_parameters())
    with pytest.raises(ValueError, match="order differs"):
        save_streamed(((n, p.detach()) for n, p in reversed(params)), {n: tuple(p.shape) for n, p in params},
                      torch.float32, ARGS, ByteTokenizer(), tmp_path)
