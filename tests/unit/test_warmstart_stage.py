"""The warm start as a stage: `run_warmstart` saves an HF checkpoint that RL loads as-is."""
import torch

from llamarl_core.bench.sync_vs_async import run_warmstart
from llamarl_core.config.load import load_config
from llamarl_core.models.build import build_model

SMALL = ["warmstart.steps=3", "warmstart.batch_size=4", "data.num_train_examples=32"]


def test_a_saved_warm_start_is_what_rl_builds_from_model_checkpoint(tmp_path):
    cfg = load_config("cpu_tiny", SMALL)
    info = run_warmstart(cfg, str(tmp_path / "ws"), log=lambda m: None)
    assert info["steps"] == 3 and info["loss"] == info["loss"]  # finite loss, not NaN
    init, _ = build_model(cfg.model, "float32", seed=cfg.run.seed)
    rl_cfg = load_config("cpu_tiny", [f"model.checkpoint={info['dir']}", "warmstart.steps=0"])
    loaded, _ = build_model(rl_cfg.model, "float32", seed=rl_cfg.run.seed)
    again = run_warmstart(cfg, str(tmp_path / "ws2"), log=lambda m: None)
    reloaded, _ = build_model(load_config("cpu_tiny", [f"model.checkpoint={again['dir']}"]).model, "float32", seed=0)
    moved = False
    for (name, a), b, c in zip(loaded.state_dict().items(), init.state_dict().values(),
                               reloaded.state_dict().values()):
        torch.testing.assert_close(a, c, rtol=0, atol=0, msg=f"{name}: warm start not deterministic")
        moved |= not torch.equal(a, b)
    assert moved  # three supervised steps changed the weights the RL run starts from
