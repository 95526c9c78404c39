"""The RL knobs' config contract: precedence, contradictions and plan-time refusals (exit 2)."""
import importlib.util

import pytest

from llamarl_cli.main import main
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config


def _clip(*overrides):
    return load_config("cpu_tiny", list(overrides)).algorithm.clip_range()


def test_clip_eps_is_the_symmetric_shorthand_and_an_explicit_bound_wins():
    assert _clip() == (0.2, 0.2)
    assert _clip("algorithm.clip_eps=0.1") == (0.1, 0.1)
    assert _clip("algorithm.clip_eps_high=0.28") == (0.2, 0.28)                  # DAPO's values
    assert _clip("algorithm.clip_eps=0.3", "algorithm.clip_eps_low=0.1") == (0.1, 0.3)
    assert _clip("algorithm.clip_eps_low=0.2", "algorithm.clip_eps_high=0.28") == (0.2, 0.28)


def test_a_clip_eps_that_both_bounds_override_is_refused_as_contradictory():
    with pytest.raises(ConfigError, match="algorithm.clip_eps=0.3 contradicts"):
        load_config("cpu_tiny", ["algorithm.clip_eps=0.3", "algorithm.clip_eps_low=0.2",
                                 "algorithm.clip_eps_high=0.28"])
    with pytest.raises(ConfigError, match="algorithm.clip_eps_low=1.0 must be < 1"):
        load_config("cpu_tiny", ["algorithm.clip_eps_low=1.0"])
    with pytest.raises(ConfigError, match="algorithm.clip_eps_high=-0.1 must be a finite number > 0"):
        load_config("cpu_tiny", ["algorithm.clip_eps_high=-0.1"])


@pytest.mark.parametrize("override, message", [
    ("algorithm.updates_per_batch=0", "algorithm.updates_per_batch=0 must be >= 1"),
    ("algorithm.mini_batches=0", "algorithm.mini_batches=0 must be >= 1"),
    ("algorithm.max_resample_rounds=-1", "algorithm.max_resample_rounds=-1 must be >= 0"),
])
def test_counts_out_of_range_are_refused_by_name(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("cpu_tiny", [override])


def test_dynamic_sampling_needs_groups_that_can_disagree():
    with pytest.raises(ConfigError, match="dynamic_sampling=true needs algorithm.group_size >= 2"):
        load_config("cpu_tiny", ["algorithm.dynamic_sampling=true", "algorithm.group_size=1"])


def _plan(capsys, *words):
    code = main(["plan", *words])
    return code, capsys.readouterr().err


def test_more_mini_batches_than_rows_or_a_buffer_past_the_limit_fail_at_plan_time(capsys):
    # cpu_tiny: 32 prompts x 8 samples on one trainer rank = 256 rows
    code, err = _plan(capsys, "algorithm.mini_batches=257")
    assert code == 2 and "algorithm.mini_batches=257 exceeds the 256 sequences" in err
    code, err = _plan(capsys, "algorithm.overlong=penalty", "algorithm.overlong_buffer_tokens=41")
    assert code == 2 and "overlong_buffer_tokens=41 exceeds generation.max_new_tokens=40" in err


def test_a_kl_reference_that_does_not_fit_fails_at_plan_time(capsys):
    # 8B on 4 trainer GPUs (FSDP2 x 4) at micro-batch 14: 56.9 GiB of the 67.1 usable without the
    # reference; the bf16 reference's shard (8.03B x 2 bytes / 4 = 3.74 GiB) and its forward's
    # fp32 log-probs (14 x 1408 x 128256 x 4 bytes = 9.4 GiB) take it to 70.1.
    words = ["recipe=8b_gsm8k_1node", "resources.trainer.micro_batch_size=14"]
    assert _plan(capsys, *words)[0] == 0
    code, err = _plan(capsys, *words, "algorithm.kl_coef=0.1")
    assert code == 2 and "role trainer needs 70.1 GiB" in err and "KL reference 3.7" in err


def test_wandb_asked_for_and_not_installed_exits_2_before_launch(capsys, monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    code = main(["train", "logging.wandb=true", f"run.dir={tmp_path / 'run'}"])
    assert code == 2 and "logging.wandb=true needs the `wandb` package" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing was launched or created
    code, err = _plan(capsys, "logging.wandb=true")  # planning elsewhere only warns
    assert code == 0
