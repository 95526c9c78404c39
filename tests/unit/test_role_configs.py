"""Each role is built from its own config sections (executors/pipeline.py: `build_role`): the
values land where the role's constructor names them, not in a neighbour's slot."""
import inspect
from types import SimpleNamespace

from llamarl_core.config.load import load_config
from llamarl_core.executors import pipeline, reward, trainer
from llamarl_core.executors.context import RoleRuntime

# 1 generator replica, 2 trainer ranks, 1 reward rank
RANKS = {"generator": [0], "trainer": [1, 2], "reward": [3]}
# prompts_per_step and group_size differ, so a swap of the two would show
CFG = ["algorithm.prompts_per_step=6", "algorithm.group_size=3", "reward.max_abs=7.5"]


def test_the_reward_role_gets_the_steps_shape_and_splits_a_chunk_by_prompt(monkeypatch):
    pools = []
    monkeypatch.setattr(reward, "WeightedRewards", lambda terms, **kw: pools.append(kw) or SimpleNamespace(
        custom=False, stats={}))
    cfg = load_config("cpu_tiny", CFG)
    executor = pipeline.build_role(cfg, {}, RoleRuntime("reward", 0, RANKS, control=None, timeline=None))
    assert (executor.prompts_per_step, executor.group_size, executor.assembly.group_size) == (6, 3, 3)
    assert pools[0]["max_abs"] == 7.5 and pools[0]["num_workers"] == cfg.resources.reward.workers
    # 6 prompts x 3 samples = 18 rows; trainer rank 0 trains prompts 0-2 (rows 0-8), rank 1 prompts 3-5
    assert executor._slices(0) == [(0, 0, 9), (1, 9, 18)]


def test_the_trainer_is_built_from_the_sections_its_constructor_names(monkeypatch):
    calls, real = [], trainer.TrainerExecutor
    monkeypatch.setattr(trainer, "TrainerExecutor", lambda *a, **kw: calls.append((a, kw)))
    cfg = load_config("cpu_tiny", CFG)
    pipeline.build_role(cfg, SimpleNamespace(role=lambda name: None, nodes=1), RoleRuntime("trainer", 0, RANKS, control=None, timeline=None))
    args, kwargs = calls[0]
    bound = inspect.signature(real.__init__).bind(None, *args, **kwargs).arguments
    expected = {"model": cfg.model, "resources": cfg.resources.trainer, "algorithm": cfg.algorithm,
                "data": cfg.data, "generation": cfg.generation, "warmstart": cfg.warmstart, "run": cfg.run,
                "logging": cfg.logging, "recipe": cfg.recipe, "export_dtype": cfg.export.dtype}
    assert {k: bound[k] for k in expected} == expected
    assert bound["learner_cfg"].micro_batch_size == cfg.resources.trainer.micro_batch_size
    assert bound["heldout_cfg"].samples_per_eval == cfg.logging.samples_per_eval
