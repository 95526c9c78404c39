"""Every value the config accepts for algorithm.name, .advantage and .aggregation trains:
`llamarl train run.max_steps=2` exits 0. Four runs cover all nine values (and both modes)."""
import pytest

from llamarl_core.config.choices import ADVANTAGE_MODES, AGGREGATIONS, LOSS_KINDS
from test_runtime import metrics, train

COMBOS = [(name, ADVANTAGE_MODES[i % len(ADVANTAGE_MODES)], AGGREGATIONS[i % len(AGGREGATIONS)], i % 2)
          for i, name in enumerate(LOSS_KINDS)]


def test_the_combinations_cover_every_accepted_value():
    assert {c[0] for c in COMBOS} == set(LOSS_KINDS)
    assert {c[1] for c in COMBOS} == set(ADVANTAGE_MODES)
    assert {c[2] for c in COMBOS} == set(AGGREGATIONS)


@pytest.mark.parametrize("name,advantage,aggregation,k", COMBOS)
def test_llamarl_train_two_steps_exits_0(tmp_path, name, advantage, aggregation, k):
    run_dir = tmp_path / name
    out = train(run_dir, "run.max_steps=2", f"algorithm.name={name}", f"algorithm.advantage={advantage}",
                f"algorithm.aggregation={aggregation}", f"algorithm.max_offpolicy_steps={k}",
                "data.num_eval_examples=4")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [m["step"] for m in metrics(run_dir)] == [1, 2]
