"""llamarl: asynchronous RL post-training for LLMs in plain PyTorch."""
__version__ = "0.1.0"
