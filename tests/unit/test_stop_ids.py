"""One stop-id rule (`generation.params.stop_ids`), the same in the engine, the sharded eval and
the trainer's overlong filter.

The three used to compute it each on their own (the scheduler, `LockstepGreedy`, the
trainer's `eos_ids`). Here a tokenizer with a second stop id (as `generation_config.json`'s
`eos_token_id` list gives Llama-3 and Qwen) is decoded by the engine and by the lockstep eval
in a one-process gloo group: both stop on it, and a completion ending there is not truncated.
"""
import socket

import pytest
import torch
import torch.distributed as dist

from llamarl_core.algorithms.overlong import truncated_rows
from llamarl_core.eval.sharded_eval import LockstepGreedy
from llamarl_core.generation import GenerationEngine, SamplingParams, stop_ids
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

from tiny_models import force_token

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64)
Q = ord("q")


class TwoStops(ByteTokenizer):
    eos_ids = (ByteTokenizer.eos_id, Q)  # EOS and a generation_config.json stop id


class OnlyEos:
    eos_id = 7


def test_the_rule_is_the_tokenizers_stop_ids_unless_ignored_plus_the_requested_ones():
    tok = TwoStops()
    assert stop_ids(tok) == (Q, 258)
    assert stop_ids(tok, SamplingParams(max_new_tokens=1, stop_token_ids=(5, Q))) == (5, Q, 258)
    assert stop_ids(tok, SamplingParams(max_new_tokens=1, ignore_eos=True, stop_token_ids=(5,))) == (5,)
    assert stop_ids(OnlyEos()) == (7,)  # a tokenizer without eos_ids: its eos_id


def _forced(token_id):
    """A model whose every next token is `token_id` (tests/tiny_models.force_token)."""
    torch.manual_seed(0)
    return force_token(Llama(ARGS).eval(), token_id)


@pytest.fixture
def one_rank_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True, timeout=__import__("datetime").timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_the_engine_and_the_lockstep_eval_stop_on_a_second_stop_id_and_it_is_not_truncated(one_rank_group):
    tok, model = TwoStops(), _forced(Q)
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    [engine] = GenerationEngine(model, tok).generate([[1, 2]], greedy)
    [lockstep] = LockstepGreedy(model, tok, one_rank_group, "cpu", torch.float32).generate([[1, 2]], greedy)
    assert engine.token_ids == lockstep.token_ids == [Q]
    assert engine.finish_reason == lockstep.finish_reason == "stop"
    # the trainer's overlong filter with max_new_tokens=1: ended on a stop id, so not cut
    tokens = torch.tensor([[1, 2, Q], [1, 2, ord("a")]])
    cut = truncated_rows(tokens, torch.tensor([2, 2]), torch.tensor([1, 1]), 1, stop_ids(tok))
    assert cut.tolist() == [False, True]
