"""Episode bookkeeping: what the trainer reads (completion, mask, log-probs, version), worked out by hand."""
import pytest

from llamarl_core.envs.episode import Episode
from llamarl_core.models import ByteTokenizer


def two_turn_episode() -> Episode:
    episode = Episode([10, 11])
    episode.add_model([1, 2, 3], [-0.1, -0.2, -0.3], versions=[5, 4, 5])
    episode.add_env([20, 21])
    episode.add_model([4], [-0.4], versions=7)
    return episode


def test_completion_mask_and_logprobs_line_up_per_token():
    episode = two_turn_episode()
    assert episode.ids == [10, 11, 1, 2, 3, 20, 21, 4]
    assert episode.completion == [1, 2, 3, 20, 21, 4]
    assert episode.model_mask == [1, 1, 1, 0, 0, 1]
    assert episode.logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.4]
    assert episode.num_tokens == 8
    assert [t.ids for t in episode.turns] == [[1, 2, 3], [4]]


def test_policy_version_is_the_oldest_a_model_turn_was_decoded_under():
    assert two_turn_episode().policy_version == 4  # min(5, 4, 5, 7)
    assert Episode([1]).policy_version is None


def test_a_turn_with_a_missing_logprob_or_version_is_refused():
    episode = Episode([1])
    with pytest.raises(ValueError, match="3 tokens has 2 log-probs"):
        episode.add_model([1, 2, 3], [-0.1, -0.2])
    with pytest.raises(ValueError, match="2 tokens has 1 versions"):
        episode.add_model([1, 2], [-0.1, -0.2], versions=[3])
    assert episode.segments == []


def test_render_marks_environment_spans():
    tok = ByteTokenizer()
    episode = Episode(tok.encode("Q?"))
    episode.add_model(tok.encode(" call") + [tok.eos_id], [0.0] * 6)
    episode.add_env(tok.encode("\n\nTool: 4\n\nAssistant:"))
    episode.add_model(tok.encode(" 4"), [0.0] * 2)
    assert episode.render(tok) == "Q? call⟦env: \n\nTool: 4\n\nAssistant:⟧ 4"
