"""`evaluate` on a scripted engine: hand-computed metrics, batching, seeds and rank shards."""
import pytest

from llamarl_core.data import Example
from llamarl_core.eval import evaluate, merge_results, reference_predictions, score_predictions
from llamarl_core.generation import Completion
from llamarl_core.models import ByteTokenizer
from llamarl_core.rewards import get_reward

EXAMPLES = [Example("a", "10+5", "15", source="arith"), Example("b", "11+1", "12", source="arith")]
# prompt text -> (greedy completion, the 4 samples in order)
SCRIPT = {
    "Q: 10+5\nA:": (" #### 15", [" #### 15", " #### 14", " #### 14", " #### 15"]),
    "Q: 11+1\nA:": (" #### 13", [" #### 13", " #### 13", " #### 12", " no idea"]),
}


class ScriptedEngine:
    """Replays SCRIPT: greedy calls get the greedy text, sampled calls the samples in order."""

    max_seq_len = 64

    def __init__(self):
        self.tokenizer, self.calls = ByteTokenizer(), []

    def generate(self, prompts, params, seed=None):
        self.calls.append((len(prompts), params.temperature, seed))
        seen, out = {}, []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            greedy, samples = SCRIPT[text]
            i = seen[text] = seen.get(text, -1) + 1
            reply = greedy if params.temperature == 0 else samples[i]
            out.append(Completion(list(reply.encode()), [0.0] * len(reply), "stop", reply))
        return out


def test_greedy_accuracy_pass_at_k_and_maj_at_k_on_a_scripted_engine():
    engine = ScriptedEngine()
    r = evaluate(engine, ByteTokenizer(), EXAMPLES, get_reward("arith"), n_samples=4,
                 temperature=0.8, seed=7, batch_size=8)
    s = r.summary
    # A: greedy right, 2/4 samples right; B: greedy wrong, 1/4 (the same case as test_passk).
    assert s["accuracy"] == 0.5
    assert s["pass@1"] == pytest.approx(0.375)
    assert s["pass@k"][2] == pytest.approx(2 / 3)
    assert s["pass@k"][4] == 1.0
    assert s["maj@k"] == {1: 0.5, 2: 0.5, 3: 0.0, 4: 0.5}
    assert [p["id"] for p in r.predictions] == ["a", "b"]
    assert r.predictions[1]["answers"] == ["13", "13", "12", None]
    assert r.predictions[0]["num_correct"] == 2
    # batch_size 8 // 4 samples = 2 examples per batch: one greedy call, one sampled call of 8
    assert engine.calls == [(2, 0.0, 7), (8, 0.8, 7)]


def test_greedy_evaluation_generates_once_and_its_completion_is_the_only_sample():
    engine = ScriptedEngine()
    r = evaluate(engine, ByteTokenizer(), EXAMPLES, get_reward("arith"))
    assert engine.calls == [(2, 0.0, 0)]
    assert r.summary["n_samples"] == 1
    assert r.summary["accuracy"] == r.summary["pass@1"] == 0.5


def test_batches_are_seeded_by_their_index_and_ranks_split_them_round_robin():
    examples = EXAMPLES * 3  # 6 examples, 2 per batch -> batches 0, 1, 2
    whole = evaluate(ScriptedEngine(), ByteTokenizer(), examples, get_reward("arith"),
                     n_samples=2, temperature=1.0, batch_size=4)
    shards = []
    for rank in range(2):
        engine = ScriptedEngine()
        shards.append(evaluate(engine, ByteTokenizer(), examples, get_reward("arith"), n_samples=2,
                               temperature=1.0, batch_size=4, rank=rank, world_size=2).predictions)
        assert [seed for *_, seed in engine.calls] == ([0, 0, 2, 2] if rank == 0 else [1, 1])
    merged = merge_results(shards)
    assert [p["index"] for p in merged.predictions] == list(range(6))
    assert merged.summary == whole.summary


def test_identical_completions_are_verified_once():
    calls = []

    def counting_reward(completion, reference):
        calls.append(completion)
        return get_reward("arith")(completion, reference)

    evaluate(ScriptedEngine(), ByteTokenizer(), EXAMPLES, counting_reward)
    assert len(calls) == 2  # greedy == the only sample: one verification per example


def test_reference_policy_scores_each_examples_own_solution():
    examples = [Example("x", "2+2", "4", solution="2+2=4\n#### 4", source="arith"),
                Example("y", "2+3", "6", solution="2+3=5\n#### 5", source="arith")]  # broken row
    preds = reference_predictions(examples)
    score_predictions(preds, get_reward("arith"))
    assert [p["greedy_reward"] for p in preds] == [1.0, 0.0]


@pytest.mark.parametrize("kwargs, match", [
    ({"n_samples": 4, "temperature": 0.0}, "identical greedy samples"),
    ({"n_samples": 0}, "n_samples"),
    ({"rank": 2, "world_size": 2}, "rank=2"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        evaluate(ScriptedEngine(), ByteTokenizer(), EXAMPLES, get_reward("arith"), **kwargs)


def test_a_prompt_longer_than_the_model_names_the_example():
    long = Example("too-long", "1" * 100, "1", source="arith")
    with pytest.raises(ValueError, match="example too-long: prompt has 106 tokens"):
        evaluate(ScriptedEngine(), ByteTokenizer(), [long], get_reward("arith"))
