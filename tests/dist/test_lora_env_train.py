"""LoRA composes with environments: `llamarl train` of a multi-turn agent with adapters only, end to
end on the tiny model (generator, reward and trainer roles, adapter-only DDMA sync)."""
from __future__ import annotations

import pytest

from test_runtime import metrics, train

ENV = '''
class Env:
    """Two turns; then reward 1.0 when the last turn wrote a digit."""
    def reset(self, example):
        self.turn = 0
        return example["messages"]

    def step(self, text):
        self.turn += 1
        done = self.turn == 2
        reply = [] if done else [{"role": "user", "content": "again"}]
        return reply, float(any(c.isdigit() for c in text)) if done else None, done
'''
STOPS = "[" + ",".join("0123456789abcdefghij") + "]"  # turns end early on the untrained model
RANK = 4
# tiny-2m (dim 256, ffn 688, 3 layers), rank 4, all seven projections, float32:
#   wq wk wv wo: A [4, 256] + B [256, 4] = 2048 each; w1 w3: A [4, 256] + B [688, 4] = 3776 each;
#   w2: A [4, 688] + B [256, 4] = 3776  ->  4·2048 + 3·3776 = 19,520 per layer, 58,560 in all
ADAPTER_BYTES = 58_560 * 4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora_env")
    (tmp / "env_mod.py").write_text(ENV)
    run_dir = tmp / "run"
    out = train(run_dir, "run.max_steps=3", "algorithm.prompts_per_step=4", "algorithm.group_size=2",
                "data.num_train_examples=8", f"env.entry={tmp / 'env_mod.py'}:Env",
                "env.max_episode_tokens=96", "generation.max_prompt_tokens=40", "generation.max_new_tokens=16",
                f"generation.stop_strings={STOPS}", f"model.lora.rank={RANK}", "algorithm.lr=1e-2",
                "logging.tensorboard=false", timeout_s=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir


def test_a_lora_agent_trains_multi_turn_episodes(run):
    lines = [m for m in metrics(run) if "env/turns_mean" in m]
    assert len(lines) == 3
    assert max(m["env/turns_mean"] for m in lines) > 1.0


def test_only_the_adapters_travel_to_the_generator(run):
    synced = [m["sync/bytes"] for m in metrics(run) if "sync/bytes" in m]
    assert synced and all(ADAPTER_BYTES <= b <= 1.1 * ADAPTER_BYTES for b in synced), synced
