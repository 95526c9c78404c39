"""Every value the config accepts for algorithm.name, .advantage and .aggregation trains in a
real `llamarl train` run (both modes). No run of its own: five runs other tests make anyway
carry one combination each (a 2-step run costs ~15 s of start-up on 2 cores), and the test
here checks that those carriers, as their modules define them, cover every value:

    sync  k = 0   aipo  mean  token_mean      test_resume's sync runs
    sync  k = 0   ppo   std   token_mean      test_rl_knobs_train's sync run
    async k = 1   pg    loo   sequence_mean   test_family_training's llama3 run
    async k = 1   clamp mean  sequence_mean   test_family_training's qwen3 run
    sync  k = 0   gspo  mean  token_mean      test_options_train's run

(test_choices_train runs one learner step of every value in-process.)"""
from llamarl_core.config.choices import ADVANTAGE_MODES, AGGREGATIONS, LOSS_KINDS

KEYS = ("name", "advantage", "aggregation", "max_offpolicy_steps")
COMBOS = [dict(zip(KEYS, c)) for c in (("aipo", "mean", "token_mean", 0), ("ppo", "std", "token_mean", 0),
                                       ("pg", "loo", "sequence_mean", 1), ("clamp", "mean", "sequence_mean", 1),
                                       ("gspo", "mean", "token_mean", 0))]


def overrides(combo: dict) -> list[str]:
    return [f"algorithm.{k}={v}" for k, v in combo.items()]


def _algorithm(words: list[str]) -> dict:
    """What a carrier's override list sets for KEYS (the schema default where it sets none)."""
    from llamarl_core.config.schema import AlgorithmConfig

    got = {k: getattr(AlgorithmConfig(), k) for k in KEYS}
    for w in words:
        key, _, value = w.partition("=")
        if key.startswith("algorithm.") and key[len("algorithm."):] in KEYS:
            got[key[len("algorithm."):]] = int(value) if value.isdigit() else value
    return got


def test_the_combinations_cover_every_accepted_value():
    assert {c["name"] for c in COMBOS} == set(LOSS_KINDS)
    assert {c["advantage"] for c in COMBOS} == set(ADVANTAGE_MODES)
    assert {c["aggregation"] for c in COMBOS} == set(AGGREGATIONS)
    assert {c["max_offpolicy_steps"] for c in COMBOS} == {0, 1}


def test_the_carrier_runs_train_every_combination():
    import test_family_training
    import test_options_train
    import test_resume
    import test_rl_knobs_train

    carriers = [test_resume.SYNC_OPTS, [*test_rl_knobs_train.COMMON, *test_rl_knobs_train.RUNS["sync"]],
                test_family_training.ALGORITHMS["llama3"], test_family_training.ALGORITHMS["qwen3"],
                test_options_train.OPTS]
    assert [_algorithm(words) for words in carriers] == COMBOS
