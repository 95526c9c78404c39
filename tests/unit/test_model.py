

def test_a_model_first_run_under_inference_mode_still_trains():
    # The engine may be the first to build the RoPE tables (inside inference_mode); the
    # trainer's backward through the same module must still work.
    import torch
    from llamarl_core.models import Llama, get_preset
    model = Llama(get_preset("tiny-2m"))
    ids = torch.randint(0, 256, (2, 8))
    with torch.inference_mode():
        model(ids)
    model(ids).sum().backward()
    assert model.tok_embeddings.weight.grad is not None
