"""Data: local-file loaders (GSM8K, MATH, generic with field mapping; JSONL, JSON, Parquet,
CSV, save_to_disk folders), prompt templates, and the built-in arithmetic task that lets the
default CPU recipe run without any file.
"""
from llamarl_core.data.arith import arith_examples
from llamarl_core.data.datasets import NoVerifier, default_reward, resolve_dataset, split_source
from llamarl_core.data.example import DataFormatError, Example, ExampleList, LoadReport
from llamarl_core.data.loaders import FORMATS, Keys, load_examples
from llamarl_core.data.templates import (TEMPLATES, PromptFormat, prompt_format, render_prompt,
                                         render_target, resolve_template)

__all__ = [
    "DataFormatError", "Example", "ExampleList", "FORMATS", "Keys", "LoadReport", "NoVerifier", "PromptFormat",
    "TEMPLATES", "arith_examples", "default_reward", "load_examples", "prompt_format", "render_prompt",
    "render_target", "resolve_dataset", "resolve_template", "split_source",
]
