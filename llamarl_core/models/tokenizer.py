"""Tokenizers: a byte tokenizer for the tiny models and `tokenizer.json` for real checkpoints.

Both expose the same small surface (`encode`, `decode`, `bos_id`, `eos_id`, `pad_id`,
`vocab_size`, `save`, `apply_chat_template`), and `load_tokenizer(dir)` picks the class from
the files present, so `load_pretrained` returns whichever the checkpoint was saved with.
Chat templates are the checkpoint's own Jinja template (`tokenizer_config.json`), rendered in
a sandbox like transformers does; without one, a plain "Role: text" format is used.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Iterable, Optional

from .args import BYTE_VOCAB_SIZE

BYTE_TOKENIZER_FILE = "byte_tokenizer.json"


def plain_chat_format(messages: list[dict]) -> str:
    """Fallback template: 'System: ...\\n\\nUser: ...\\n\\nAssistant:' (generation prompt last)."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts + ["Assistant:"])


def render_chat_template(template: str, messages: list[dict], bos_token: str, eos_token: str) -> str:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template).render(messages=messages, bos_token=bos_token,
                                            eos_token=eos_token, add_generation_prompt=True)


class ByteTokenizer:
    """UTF-8 bytes are ids 0..255; then pad=256, bos=257, eos=258, one reserved (259)."""

    pad_id, bos_id, eos_id = 256, 257, 258
    vocab_size = BYTE_VOCAB_SIZE

    def __init__(self, chat_template: Optional[str] = None):
        self.chat_template = chat_template

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return (self.eos_id,)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_id] + ids if add_bos else ids

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict]) -> str:
        if self.chat_template:
            return render_chat_template(self.chat_template, messages, "", "")
        return plain_chat_format(messages)

    def save(self, directory) -> None:
        data = {"type": "byte", "vocab_size": self.vocab_size, "pad_id": self.pad_id,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "chat_template": self.chat_template}
        (Path(directory) / BYTE_TOKENIZER_FILE).write_text(json.dumps(data, indent=2))


def _token_content(value) -> Optional[str]:
    return value.get("content") if isinstance(value, dict) else value


class HFTokenizer:
    """`tokenizer.json` via the `tokenizers` library, specials from `tokenizer_config.json`."""

    def __init__(self, tokenizer, config: Optional[dict] = None, eos_ids: Optional[list[int]] = None):
        self._tok = tokenizer
        self.config = dict(config or {})
        self.bos_token = _token_content(self.config.get("bos_token"))
        self.eos_token = _token_content(self.config.get("eos_token"))
        pad_token = _token_content(self.config.get("pad_token"))
        self.bos_id = self._tok.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_id = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        pad_id = self._tok.token_to_id(pad_token) if pad_token else None
        # Llama-3 ships no pad token; any id works since padded positions are masked out.
        self.pad_id = pad_id if pad_id is not None else (self.eos_id if self.eos_id is not None else 0)
        ids = list(eos_ids or []) + ([self.eos_id] if self.eos_id is not None else [])
        self.eos_ids = tuple(dict.fromkeys(ids))
        template = self.config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            by_name = {t["name"]: t["template"] for t in template}
            template = by_name.get("default", next(iter(by_name.values()), None))
        self.chat_template = template

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_dir(cls, directory) -> "HFTokenizer":
        from tokenizers import Tokenizer

        directory = Path(directory)
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        eos_ids: list[int] = []
        gen_file = directory / "generation_config.json"
        if gen_file.is_file():
            eos = json.loads(gen_file.read_text()).get("eos_token_id")
            eos_ids = eos if isinstance(eos, list) else ([eos] if eos is not None else [])
        try:
            tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as err:
            raise ValueError(f"{directory / 'tokenizer.json'}: cannot be read ({err})") from err
        return cls(tokenizer, config, eos_ids)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_bos:
            if self.bos_id is None:
                raise ValueError("add_bos=True but the tokenizer has no bos_token")
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def apply_chat_template(self, messages: list[dict]) -> str:
        if self.chat_template:
            return render_chat_template(self.chat_template, messages, self.bos_token or "",
                                        self.eos_token or "")
        return plain_chat_format(messages)

    def save(self, directory) -> None:
        directory = Path(directory)
        self._tok.save(str(directory / "tokenizer.json"))
        (directory / "tokenizer_config.json").write_text(json.dumps(self.config, indent=2))
        if len(self.eos_ids) > 1:  # e.g. Llama-3.1 instruct: end_of_text, eom, eot
            (directory / "generation_config.json").write_text(
                json.dumps({"eos_token_id": list(self.eos_ids)}, indent=2))


class MissingTokenizer:
    """Stands in for the tokenizer of a model-only checkpoint: the weights load, and only a
    use of the tokenizer fails, naming the files it looked for."""

    def __init__(self, directory: Path):
        self.directory = directory

    def __getattr__(self, name):
        raise FileNotFoundError(f"no tokenizer in {self.directory}: expected {BYTE_TOKENIZER_FILE} "
                                f"or tokenizer.json (needed for tokenizer.{name})")

    def __bool__(self) -> bool:
        return False


def load_tokenizer(directory, required: bool = True):
    """ByteTokenizer if `byte_tokenizer.json` is present, else HFTokenizer from tokenizer.json;
    with neither, an error (`required`) or a `MissingTokenizer` that errors on first use."""
    directory = Path(directory)
    byte_file = directory / BYTE_TOKENIZER_FILE
    if byte_file.is_file():
        data = json.loads(byte_file.read_text())
        if data.get("vocab_size") != BYTE_VOCAB_SIZE:
            raise ValueError(f"{byte_file}: vocab_size {data.get('vocab_size')} != {BYTE_VOCAB_SIZE}")
        return ByteTokenizer(chat_template=data.get("chat_template"))
    if (directory / "tokenizer.json").is_file():
        return HFTokenizer.from_dir(directory)
    if not required:
        return MissingTokenizer(directory)
    raise FileNotFoundError(f"no tokenizer in {directory}: expected {BYTE_TOKENIZER_FILE} or tokenizer.json")
