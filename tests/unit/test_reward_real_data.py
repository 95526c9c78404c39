"""GSM8K's own reference solutions score 1319/1319 against their answers and shuffled pairs
only match where two answers coincide (runs the script's GSM8K part; skipped without data)."""
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO.parent / "shared" / "data"


def _script():
    spec = importlib.util.spec_from_file_location(
        "verify_rewards_real_data", REPO / "scripts" / "verify_rewards_real_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not (DATA_DIR / "gsm8k" / "test.jsonl").is_file(),
                    reason="GSM8K test set not found beside the repo (../shared/data)")
def test_gsm8k_reference_solutions_all_verify_and_shuffled_pairs_do_not():
    matched, shuffled = _script().verify_gsm8k(DATA_DIR)
    assert (matched["correct"], matched["count"]) == (1319, 1319)
    assert shuffled["num_unexplained"] == 0
    assert shuffled["accuracy"] < 0.02
