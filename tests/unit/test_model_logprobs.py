"""token_logprobs: the shared definition of per-token log-probabilities."""
import math

import pytest
import torch

from llamarl_core.models import token_logprobs


def test_token_logprobs_matches_hand_computed_log_softmax_with_temperature():
    logits = torch.tensor([[[0.0, 2.0, 4.0]]])  # [1, 1, 3]
    # T = 2 -> scaled logits [0, 1, 2]; log p(2) = 2 - log(e^0 + e^1 + e^2) = 2 - 2.40761 = -0.40761
    got = token_logprobs(logits, torch.tensor([[2]]), temperature=2.0)
    assert got.shape == (1, 1)
    assert got.item() == pytest.approx(2 - math.log(1 + math.e + math.e ** 2), abs=1e-6)


def test_token_logprobs_rejects_zero_temperature():
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.long), temperature=0.0)
