"""Shared test fixtures: the repo root, the optional real data beside it, one torch thread, a
test module's custom reward file."""
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent")
    return SHARED_DATA


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Every in-process test runs torch on one thread. Tiny models run fastest on one, and a
    second only spins: one learner step of cpu_tiny took 7 s on 2 threads and 0.4 s on one
    on the shared 2-core machine (test_choices_train). Processes a test starts set their own
    (the plan's `threads`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)



@pytest.fixture
def reward_file(request, tmp_path) -> Path:
    """The test module's `REWARD_FILE` source written to tmp_path/my_reward.py: a custom reward
    (`data.reward=<path>:<function>`) for RewardPool and the import check to load."""
    path = tmp_path / "my_reward.py"
    path.write_text(request.module.REWARD_FILE)
    return path
