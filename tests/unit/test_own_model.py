"""Bringing your own model: Adam's betas and eps from `trainer.*`, a chat template's variables
from `data.chat_template_kwargs`, `recipe=hf`, and the values a run inherits from its recipe
that `llamarl plan` lists."""
import json

import pytest
import torch

from llamarl_cli.main import main
from llamarl_core.config.load import load_config
from llamarl_core.config.schema import WarmStartConfig
from llamarl_core.data import Example, prompt_format, render_prompt
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.executors.setup import encode_prompts
from llamarl_core.sft.warmstart import WarmStart
from launch_guard import Launched, no_launch  # noqa: F401  (no_launch: a fixture)
from tok_tiny import CHATML

# Qwen3's switch, as its template writes it: an empty think block after the generation prompt
# when the caller passes enable_thinking=false, nothing otherwise.
THINKING = CHATML + ("{% if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
                     "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}")
EMPTY_THINK = "<think>\n\n</think>\n\n"
NO_THINKING = ["data.template=chat", "data.chat_template_kwargs={enable_thinking: false}"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- trainer.adam_betas / trainer.adam_eps ----------------------------------------------------

class OneTensor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))


def _two_steps(optimizer, p: torch.nn.Parameter) -> torch.Tensor:
    """Two steps at lr 0.1 with gradients [0.5, -0.25], then [-0.5, 1.0]."""
    for group in optimizer.param_groups:
        group["lr"] = 0.1
    for grad in ([0.5, -0.25], [-0.5, 1.0]):
        p.grad = torch.tensor(grad)
        optimizer.step()
    return p.detach().clone()


# By hand, betas (0.5, 0.8), eps 0.1, lr 0.1, no weight decay; update = lr * m_hat / (sqrt(v_hat) + eps):
#   step 1: m = 0.5 g1, v = 0.2 g1^2; bias-corrected m_hat = g1, v_hat = g1^2
#           p[0] = 1 - 0.1 * 0.5 / (0.5 + 0.1)           = 0.9166667
#           p[1] = -2 + 0.1 * 0.25 / (0.25 + 0.1)        = -1.9285714
#   step 2: m = 0.5 m1 + 0.5 g2, v = 0.8 v1 + 0.2 g2^2; m_hat = m / 0.75, v_hat = v / 0.36
#     p[0]: m = 0.125 - 0.25 = -0.125, m_hat = -0.1666667; v = 0.04 + 0.05 = 0.09, v_hat = 0.25
#           p[0] = 0.9166667 + 0.1 * 0.1666667 / (0.5 + 0.1) = 0.9444444
#     p[1]: m = -0.0625 + 0.5 = 0.4375, m_hat = 0.5833333; v = 0.01 + 0.2 = 0.21, v_hat = 0.5833333
#           p[1] = -1.9285714 - 0.1 * 0.5833333 / (0.7637626 + 0.1) = -1.9285714 - 0.0675339 = -1.9961053
BY_HAND = [0.9444444, -1.9961053]
ADAM = ["trainer.adam_betas=[0.5,0.8]", "trainer.adam_eps=0.1"]


def test_the_rl_optimizer_takes_the_configured_betas_and_eps():
    group = Learner(OneTensor(), learner_config(load_config("cpu_tiny", ADAM))).optimizer.param_groups[0]
    assert (group["betas"], group["eps"]) == ((0.5, 0.8), 0.1)
    default = Learner(OneTensor(), learner_config(load_config("cpu_tiny", []))).optimizer.param_groups[0]
    assert (default["betas"], default["eps"]) == ((0.9, 0.95), 1e-8)  # what RL always used


def test_an_rl_adamw_step_with_non_default_betas_and_eps_equals_the_update_by_hand():
    model = OneTensor()
    learner = Learner(model, learner_config(load_config("cpu_tiny", ADAM)))
    assert _two_steps(learner.optimizer, model.p).tolist() == pytest.approx(BY_HAND, abs=1e-6)
    # the defaults give another answer, so the numbers above do test the betas and eps
    model = OneTensor()
    default = Learner(model, learner_config(load_config("cpu_tiny", [])))
    assert _two_steps(default.optimizer, model.p).tolist() != pytest.approx(BY_HAND, abs=1e-3)


def test_the_warm_start_optimizer_takes_the_same_betas_and_eps_through_the_warm_start_stage(monkeypatch):
    import llamarl_core.sft.warmstart as stage
    from llamarl_core.data.splits import load_split
    from llamarl_core.models import ByteTokenizer

    built = []
    monkeypatch.setattr(stage, "WarmStart", lambda *a, **k: built.append(WarmStart(*a, **k)) or built[-1])
    cfg = load_config("cpu_tiny", ADAM + ["data.num_train_examples=8"])
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), ByteTokenizer())
    seqs, _ = stage.warmstart_sequences(cfg.warmstart, cfg.data, cfg.generation, prompts, ByteTokenizer())
    stage.warmstart_steps(OneTensor(), WarmStartConfig(steps=0), 0, seqs, ByteTokenizer().pad_id,
                          adam=learner_config(cfg))
    group = built[0].optimizer.param_groups[0]
    assert (group["betas"], group["eps"]) == ((0.5, 0.8), 0.1)
    model = OneTensor()
    ws = WarmStart(model, WarmStartConfig(), 0, (0.5, 0.8), 0.1)
    assert _two_steps(ws.optimizer, model.p).tolist() == pytest.approx(BY_HAND, abs=1e-6)
    default = WarmStart(OneTensor(), WarmStartConfig(), 0).optimizer.param_groups[0]
    assert (default["betas"], default["eps"]) == ((0.9, 0.999), 1e-8)  # what cpu_tiny's warm start was tuned with


@pytest.mark.parametrize("override, key", [("trainer.adam_betas=[0.9,1.0]", "trainer.adam_betas"),
                                           ("trainer.adam_betas=[-0.1,0.9]", "trainer.adam_betas"),
                                           ("trainer.adam_betas=[0.9]", "trainer.adam_betas"),
                                           ("trainer.adam_eps=0", "trainer.adam_eps"),
                                           ("trainer.adam_eps=-1e-8", "trainer.adam_eps")])
def test_betas_outside_zero_one_or_a_non_positive_eps_exit_2_naming_the_key(capsys, override, key):
    code, out, err = run(capsys, "plan", override)
    assert code == 2
    assert err.count("\n") == 1 and key in err


# --- data.chat_template_kwargs ----------------------------------------------------------------

@pytest.fixture()
def thinking_tokenizer(tmp_path):
    from llamarl_core.models.tokenizer import load_tokenizer
    from tok_tiny import tiny_hf_tokenizer

    directory = tiny_hf_tokenizer(tmp_path / "tok", template=THINKING)
    return directory, load_tokenizer(directory)


def test_the_training_prompts_carry_the_template_variables(thinking_tokenizer):
    _, tok = thinking_tokenizer
    cfg = load_config("cpu_tiny", NO_THINKING + ["generation.max_prompt_tokens=200"])
    default = load_config("cpu_tiny", ["data.template=chat", "generation.max_prompt_tokens=200"])
    ex = Example("0", "What is 2+2?", "4", None, "arith")
    with_kwargs = render_prompt(ex, prompt_format(cfg.data), tok)
    without = render_prompt(ex, prompt_format(default.data), tok)
    assert without == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert with_kwargs == without + EMPTY_THINK  # exactly what the template adds for enable_thinking=false
    prompts = encode_prompts(cfg.data, cfg.generation, [ex], tok)  # what the generator and trainer see
    assert prompts.prompt_ids[0] == tok.encode(with_kwargs)


def test_llamarl_data_shows_the_prompt_rendered_with_the_template_variables(thinking_tokenizer, capsys):
    directory, tok = thinking_tokenizer
    common = [f"model.checkpoint={directory}", "n=1", "--json", "generation.max_prompt_tokens=200"]
    code, out, err = run(capsys, "data", *common, *NO_THINKING)
    assert code == 0, err
    code, plain_out, err = run(capsys, "data", *common, "data.template=chat")
    assert code == 0, err
    with_kwargs, without = json.loads(out.splitlines()[0]), json.loads(plain_out.splitlines()[0])
    assert with_kwargs["prompt"] == without["prompt"] + EMPTY_THINK
    assert with_kwargs["prompt_ids"] == tok.encode(with_kwargs["prompt"])


def test_eval_renders_its_prompts_with_the_template_variables(tmp_path, monkeypatch):
    from hf_tiny import save_tiny
    import llamarl_core.eval.parallel as parallel

    ckpt = save_tiny("qwen3", tmp_path / "qwen3", chat_template=THINKING)
    cfg = load_config("cpu_tiny", NO_THINKING + [f"eval.checkpoint={ckpt}"])
    ex = Example("0", "What is 2+2?", "4", None, "arith")
    spec = parallel.model_spec(cfg, [ex], 4)  # the pre-launch template check renders with them too
    assert spec["chat_template_kwargs"] == {"enable_thinking": False}
    seen = {}
    monkeypatch.setattr(parallel, "generate_predictions", lambda engine, tok, examples, template, **k:
                        seen.update(prompt=render_prompt(examples[0], template, tok)) or [])
    parallel._generate(0, spec, [ex], False)  # what each eval replica runs
    assert seen["prompt"].endswith("<|im_start|>assistant\n" + EMPTY_THINK)


def test_the_pre_launch_template_check_passes_the_variables(tmp_path):
    from llamarl_core.data.template_check import check_template
    from tok_tiny import tiny_hf_tokenizer

    # a template that fails unless the caller says whether to think
    strict = ("{% if enable_thinking is not defined %}{{ raise_exception('say enable_thinking') }}{% endif %}"
              + THINKING)
    directory = tiny_hf_tokenizer(tmp_path / "strict", template=strict)
    ex = Example("0", "What is 2+2?", "4", None, "arith")
    with_kwargs = prompt_format(load_config("cpu_tiny", NO_THINKING).data)
    assert check_template(directory, with_kwargs, [ex]) is None
    without = prompt_format(load_config("cpu_tiny", ["data.template=chat"]).data)
    assert "say enable_thinking" in check_template(directory, without, [ex])


@pytest.mark.parametrize("override", ["data.chat_template_kwargs=5", "data.chat_template_kwargs=[1,2]",
                                      "data.chat_template_kwargs={tokenize: true}"])
def test_chat_template_kwargs_that_are_not_a_mapping_of_template_variables_exit_2(capsys, override):
    code, out, err = run(capsys, "plan", override)
    assert code == 2
    assert err.count("\n") == 1 and "data.chat_template_kwargs" in err


def test_every_override_spelling_of_a_template_variable_is_accepted():
    for words in (["data.chat_template_kwargs={enable_thinking: false}"],
                  ["data.chat_template_kwargs.enable_thinking=false"],
                  ["+data.chat_template_kwargs.enable_thinking=false"]):
        assert load_config("cpu_tiny", words).data.chat_template_kwargs == {"enable_thinking": False}
    assert load_config("cpu_tiny", []).data.chat_template_kwargs == {}


# --- recipe=hf and the values a run takes from its recipe -------------------------------------

FITS = ["generation.max_prompt_tokens=64", "generation.max_new_tokens=32"]  # the tiny model has 128 positions
CPU_TINY_SETS = {"resources.generator.max_batch_size": 256, "resources.trainer.micro_batch_size": 64,
                 "algorithm.lr": 7e-05, "warmstart.steps": 130, "generation.max_new_tokens": 40,
                 "generation.temperature": 0.7, "generation.max_prompt_tokens": 16,
                 "data.num_train_examples": 4000, "data.solution_style": "digit_sums", "run.max_steps": 150,
                 "run.max_time_s": 200, "run.eval_every_steps": 20}  # recipes/cpu_tiny.yaml, read by eye


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    from hf_tiny import save_tiny
    return save_tiny("qwen2.5", tmp_path_factory.mktemp("own") / "qwen", chat_template=CHATML)


@pytest.mark.parametrize("verb", ["plan", "train"])
def test_recipe_hf_without_a_checkpoint_exits_2_with_one_line_saying_so(capsys, no_launch, verb):
    code, out, err = run(capsys, verb, "recipe=hf")
    assert code == 2
    assert err == ("llamarl: error: recipe hf needs model.checkpoint: add model.checkpoint=... to the "
                   "command line (a Hugging Face checkpoint directory)\n")


def test_recipe_hf_plans_a_pretrained_models_run_and_lists_what_it_set(capsys, hf_checkpoint):
    code, out, err = run(capsys, "plan", "recipe=hf", f"model.checkpoint={hf_checkpoint}", *FITS, "--json")
    assert code == 0, err
    block = json.loads(out)["set_by_recipe"]
    assert block == {"recipe": "hf", "advice": None, "values": {
        "resources.trainer.micro_batch_size": 8, "algorithm.lr": 1e-06, "data.template": "chat",
        "run.max_steps": 500, "run.eval_every_steps": 25, "run.checkpoint_every_steps": 50,
        "controller.heartbeat_timeout_s": 600, "controller.step_timeout_s": 1800}}
    cfg = load_config("hf", [f"model.checkpoint={hf_checkpoint}"])
    assert (cfg.warmstart.steps, cfg.run.max_time_s, cfg.algorithm.lr) == (0, 0, 1e-6)  # no warm start, no cap


def test_a_checkpoint_under_the_default_recipe_lists_every_inherited_toy_value_and_points_to_recipe_hf(
        capsys, hf_checkpoint):
    code, out, err = run(capsys, "plan", f"model.checkpoint={hf_checkpoint}", "algorithm.lr=1e-6", *FITS)
    assert code == 0, err
    want = {k: v for k, v in CPU_TINY_SETS.items() if k not in ("algorithm.lr", "generation.max_new_tokens",
                                                                 "generation.max_prompt_tokens")}
    pairs = ", ".join(f"{k}={float(v) if k == 'run.max_time_s' else v}" for k, v in want.items())
    block = out[out.index("set by recipe"):].split("\n")
    assert block[0] == f"set by recipe cpu_tiny (not on your command line): {pairs}"
    assert "recipe=hf" in block[1] and f"llamarl train recipe=hf model.checkpoint={hf_checkpoint}" in block[1]
    code, out, err = run(capsys, "plan", f"model.checkpoint={hf_checkpoint}", *FITS, "--json")
    assert json.loads(out)["set_by_recipe"]["values"] == {k: v for k, v in CPU_TINY_SETS.items()
                                                          if not k.startswith("generation.max_")}


def test_plan_out_records_the_inherited_values_in_plan_json(capsys, hf_checkpoint, tmp_path):
    code, out, err = run(capsys, "plan", f"model.checkpoint={hf_checkpoint}", *FITS, "--out", str(tmp_path / "r"))
    assert code == 0, err
    block = json.loads((tmp_path / "r" / "plan.json").read_text())["set_by_recipe"]
    assert block["recipe"] == "cpu_tiny" and block["values"]["warmstart.steps"] == 130
    assert "recipe=hf" in block["advice"] and "recipe=hf" in err


def test_trains_pre_launch_plan_shows_the_inherited_values(capsys, no_launch, hf_checkpoint, tmp_path):
    with pytest.raises(Launched):
        main(["train", f"model.checkpoint={hf_checkpoint}", *FITS, f"run.dir={tmp_path / 'run'}"])
    out = capsys.readouterr().out
    assert "set by recipe cpu_tiny (not on your command line): " in out and "warmstart.steps=130" in out
    assert "use recipe=hf" in out


def test_an_override_of_a_section_covers_the_keys_under_it_and_a_byte_checkpoint_gets_no_advice(tmp_path):
    from llamarl_core.plan.recipe_values import set_by_recipe

    values = set_by_recipe("cpu_tiny", ["resources.trainer={micro_batch_size: 8}", "+run.max_steps=3"])["values"]
    assert "resources.trainer.micro_batch_size" not in values and "run.max_steps" not in values
    assert values["resources.generator.max_batch_size"] == 256
    (tmp_path / "byte_tokenizer.json").write_text("{}")  # cpu_tiny's own warm start, continued on purpose
    assert set_by_recipe("cpu_tiny", [], str(tmp_path))["advice"] is None
    assert set_by_recipe("cpu_tiny", [])["advice"] is None  # no model brought: the toy run as designed


def test_a_recipe_file_is_named_by_its_path_not_its_stem():
    from llamarl_core.plan.recipe_values import describe, set_by_recipe

    block = set_by_recipe("examples/my_task/recipe.yaml", [])
    assert block["recipe"] == "examples/my_task/recipe.yaml"  # was "recipe": "set by recipe recipe (...)"
    assert describe(block).startswith("set by recipe examples/my_task/recipe.yaml (not on your command line): ")
    assert block["values"]["warmstart.steps"] == 120
