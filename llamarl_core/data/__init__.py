"""Data: JSONL loaders (GSM8K, MATH, generic), prompt templates, and the built-in
arithmetic task that lets the default CPU recipe run without any file.
"""
from llamarl_core.data.arith import arith_examples
from llamarl_core.data.datasets import default_reward, resolve_dataset
from llamarl_core.data.example import DataFormatError, Example, ExampleList, LoadReport
from llamarl_core.data.loaders import FORMATS, load_examples
from llamarl_core.data.templates import (TEMPLATES, PromptFormat, prompt_format, render_prompt,
                                         render_target, resolve_template)

__all__ = [
    "DataFormatError", "Example", "ExampleList", "FORMATS", "LoadReport", "PromptFormat", "TEMPLATES",
    "arith_examples", "default_reward", "load_examples", "prompt_format", "render_prompt",
    "render_target", "resolve_dataset", "resolve_template",
]
