"""The warm start of a generic row teaches the row's answer exactly as written.

A generic row (`data.name=generic`, `data.answer_key=...`) is scored by the user's reward,
which reads the answer field; the warm-start target is a space and that field (a row's own
`solution` field, when it has one). Before, it was ` #### N`, so the README's last-line reward
scored the reference 0.5 and RL had nothing to move (issue #45).
"""
import importlib.util
from pathlib import Path

from llamarl_core.config.load import load_config
from llamarl_core.data.splits import load_split
from llamarl_core.executors.setup import encode_prompts
from llamarl_core.models import ByteTokenizer
from llamarl_core.rewards.numeric import gsm8k_reward
from llamarl_core.sft.warmstart import sft_sequences

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_task"


def _score():
    spec = importlib.util.spec_from_file_location("my_reward", EXAMPLE / "my_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.score


def test_the_warm_start_target_of_a_generic_row_is_its_answer_then_eos(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"input": "12+34", "target": "46"}\n{"input": "1+1", "target": "2"}\n')
    cfg = load_config("cpu_tiny", ["data.name=generic", f"data.path={path}", "data.prompt_key=input",
                                   "data.answer_key=target", "data.reward=gsm8k", "generation.max_prompt_tokens=64"])
    tok = ByteTokenizer()
    examples = load_split(cfg.data, "train")
    (tokens, target_mask), = sft_sequences(encode_prompts(cfg.data, cfg.generation, examples, tok), tok)
    prompt_len = target_mask.index(1)
    assert target_mask == [0] * prompt_len + [1] * (len(tokens) - prompt_len)  # the target and its EOS trained
    assert tok.decode(tokens[:prompt_len]) == "Question: 12+34\nAnswer:"
    assert tokens[prompt_len:] == tok.encode(" 46") + [tok.eos_id]


def test_the_examples_reward_gives_every_warm_start_target_of_its_data_full_marks():
    cfg = load_config("cpu_tiny", ["data.name=generic", f"data.path={EXAMPLE / 'my_task.jsonl'}",
                                   "data.prompt_key=input", "data.answer_key=target", "data.reward=gsm8k",
                                   "generation.max_prompt_tokens=64"])
    score, tok = _score(), ByteTokenizer()
    examples = load_split(cfg.data, "train") + load_split(cfg.data, "test")
    prompts = encode_prompts(cfg.data, cfg.generation, examples, tok)
    for ex, (tokens, target_mask) in zip(examples, sft_sequences(prompts, tok)):
        completion = tok.decode(tokens[target_mask.index(1):-1])  # what the generator returns: EOS not in the text
        assert score(completion, ex.as_dict()) == 1.0, (ex.prompt, completion)
    assert score(" #### 2082", {"target": "2082"}) == 0.5  # the old bare target: half marks, RL stalled


def test_a_numeric_generic_answer_still_scores_full_marks_under_the_gsm8k_reward():
    assert gsm8k_reward(" 46", "46") == 1.0
