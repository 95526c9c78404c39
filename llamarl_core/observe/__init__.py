"""What a run says about itself while it runs: metrics.jsonl and its sinks (TensorBoard, W&B),
the live view's progress, whether the run can learn, why it ended. `report/` reads the files after."""
