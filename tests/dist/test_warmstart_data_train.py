"""`llamarl train warmstart.data=chats.jsonl`: the trainer's warm start reads the user's chats
(not the task's references; a bad row skipped with data.on_error=skip and counted), saves
checkpoints/warmstart, and RL runs 2 steps from it. About 16-30 s on the shared 2-core box."""
import json

from test_runtime import metrics, train

CHAT = [{"role": "user", "content": "12+34"}, {"role": "assistant", "content": "46"}]


def test_a_run_warm_starts_on_chat_data_then_trains(tmp_path):
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": CHAT}) + "\n{oops\n")
    run_dir = tmp_path / "run"
    out = train(run_dir, f"warmstart.data={chats}", "warmstart.steps=3", "warmstart.batch_size=2",
                "data.on_error=skip", "run.max_steps=2", "logging.tensorboard=false",
                # sync: one colocated group (faster), whose 2 trainer ranks share the file's one chat
                "algorithm.max_offpolicy_steps=0", "data.num_eval_examples=2")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # "Q: 12+34\nA:" 11 (the arithmetic prompts' format) + " 46" 3 + EOS = 15 tokens, " 46" + EOS trained
    assert "warmstart.data: 1 chats checked, up to 15 tokens (limit 24), 4 assistant tokens trained" in out.stdout
    assert (run_dir / "checkpoints" / "warmstart").is_dir()
    assert [m["step"] for m in metrics(run_dir)] == [1, 2]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["data_skipped_lines"] == {"train": 0, "test": 0, "warmstart": 1}
    assert summary["mode"] == "sync"  # the actor role: k = 0
