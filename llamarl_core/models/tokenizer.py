"""Tokenizers: a byte tokenizer for the built-in tiny models, `transformers.AutoTokenizer` for
Hugging Face checkpoints.

Why AutoTokenizer and not our own reader: a checkpoint's tokenizer is more than
`tokenizer.json` (added tokens, special-token files, a chat template in
`tokenizer_config.json` or `chat_template.jinja`, SentencePiece models), and transformers is
what the checkpoint was saved with. `HFTokenizer` is a thin adapter exposing the small surface
the rest of the code uses, the same as `ByteTokenizer`'s: `encode`, `decode`, `bos_id`,
`eos_id`, `eos_ids` (stop ids), `pad_id`, `vocab_size`, `chat_template`,
`apply_chat_template(messages, add_generation_prompt=True, **template_variables) -> str` and `save(dir)`.
`load_tokenizer(dir)` picks the class from the files present.

Stop ids are the tokenizer's EOS plus every id of `generation_config.json`'s `eos_token_id`
(an int or a list: Llama-3 instruct stops on `<|eot_id|>` as well as `<|end_of_text|>`).
`save` writes the tokenizer files, the chat template and `generation_config.json` byte for
byte as they came in, so an exported checkpoint has the tokenizer its base model had.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from .args import BYTE_VOCAB_SIZE

BYTE_TOKENIZER_FILE = "byte_tokenizer.json"
# What a Hugging Face checkpoint keeps its tokenizer in (any subset), copied as-is on export.
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                      "added_tokens.json", "chat_template.jinja", "chat_template.json",
                      "tokenizer.model", "vocab.json", "merges.txt", "generation_config.json")
CHAT_TEMPLATE_DIR = "additional_chat_templates"  # transformers 5.x: named extra templates
_LOADABLE = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def plain_chat_format(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """Fallback when `data.template=chat` and the tokenizer has no chat template:
    'System: ...\\n\\nUser: ...\\n\\nAssistant:' (generation prompt last)."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts + ["Assistant:"] * add_generation_prompt)


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

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **template_kwargs) -> str:
        if not self.chat_template:
            return plain_chat_format(messages, add_generation_prompt)
        # transformers' own renderer (sandboxed Jinja), so there is one renderer in the code
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(conversations=[messages], chat_template=self.chat_template,
                                            add_generation_prompt=add_generation_prompt,
                                            **{"bos_token": "", "eos_token": "", **template_kwargs})
        return rendered[0]

    def save(self, directory) -> None:
        data = {"type": "byte", "vocab_size": self.vocab_size, "pad_id": self.pad_id,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "chat_template": self.chat_template}
        (Path(directory) / BYTE_TOKENIZER_FILE).write_text(json.dumps(data, indent=2))


def _eos_list(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


class HFTokenizer:
    """A `transformers` tokenizer behind the small surface the code uses.

    `files` holds the bytes of the tokenizer files it was read from (written back by `save`);
    without them (a tokenizer built in memory), `save` uses transformers' `save_pretrained`."""

    def __init__(self, tokenizer, generation_eos_ids: Iterable[int] = (),
                 files: Optional[dict[str, bytes]] = None):
        self._tok = tokenizer
        self.files = dict(files or {})
        self.bos_id: Optional[int] = tokenizer.bos_token_id
        self.eos_id: Optional[int] = tokenizer.eos_token_id
        # No pad token (Llama-3): any id works, padded positions are masked out.
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else (self.eos_id if self.eos_id is not None else 0)
        ids = ([self.eos_id] if self.eos_id is not None else []) + list(generation_eos_ids)
        self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys(ids))

    @classmethod
    def from_dir(cls, directory) -> "HFTokenizer":
        directory = Path(directory)
        try:
            from transformers import AutoTokenizer
        except ImportError as err:
            raise ValueError(f"{directory}: a Hugging Face tokenizer needs `transformers` "
                             f"(pip install 'llamarl[hf]')") from err
        _check_json_files(directory)
        try:  # local files only: nothing downloads at run time, no remote code runs
            tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except Exception as err:  # transformers raises OSError, ValueError, JSON errors...
            raise ValueError(f"{directory}: the tokenizer cannot be read by transformers' "
                             f"AutoTokenizer ({type(err).__name__}: {err})") from err
        gen_eos: list[int] = []
        gen_file = directory / "generation_config.json"
        if gen_file.is_file():
            try:
                gen_eos = _eos_list(json.loads(gen_file.read_text()).get("eos_token_id"))
            except (json.JSONDecodeError, TypeError, ValueError) as err:
                raise ValueError(f"{gen_file}: eos_token_id must be an int or a list of ints ({err})") from err
        files = {name: (directory / name).read_bytes() for name in HF_TOKENIZER_FILES
                 if (directory / name).is_file()}
        extra = directory / CHAT_TEMPLATE_DIR
        if extra.is_dir():
            files.update({f"{CHAT_TEMPLATE_DIR}/{p.name}": p.read_bytes()
                          for p in sorted(extra.iterdir()) if p.is_file()})
        return cls(tok, gen_eos, files)

    @property
    def vocab_size(self) -> int:
        return len(self._tok)  # base vocabulary plus added tokens

    @property
    def chat_template(self) -> Optional[str]:
        """The default chat template (transformers keeps several as a name → template dict)."""
        template = self._tok.chat_template
        if isinstance(template, dict):
            return template.get("default") or next(iter(template.values()), None)
        return template

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False)
        if add_bos:
            if self.bos_id is None:
                raise ValueError("add_bos=True but the tokenizer has no bos_token")
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **template_kwargs) -> str:
        """The text of `messages`, by default ending in the assistant's generation prompt (a
        prompt); `encode` of it equals transformers' `apply_chat_template(..., tokenize=True)`.
        `template_kwargs`: extra template variables (data.chat_template_kwargs)."""
        if not self._tok.chat_template:
            return plain_chat_format(messages, add_generation_prompt)
        return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             **template_kwargs)

    def save(self, directory) -> None:
        directory = Path(directory)
        if not self.files:
            self._tok.save_pretrained(str(directory))
            if len(self.eos_ids) > 1:
                (directory / "generation_config.json").write_text(
                    json.dumps({"eos_token_id": list(self.eos_ids)}, indent=2))
            return
        for name, data in self.files.items():
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


class MissingTokenizer:
    """Stands in for the tokenizer of a model-only checkpoint: the weights load, and only a
    use of the tokenizer fails, naming the files it looked for."""

    chat_template = None

    def __init__(self, directory: Path):
        self.directory = directory

    def __getattr__(self, name):
        raise FileNotFoundError(f"no tokenizer in {self.directory}: expected {BYTE_TOKENIZER_FILE} "
                                f"or tokenizer.json (or another Hugging Face tokenizer file: "
                                f"{', '.join(_LOADABLE[1:])}) (needed for tokenizer.{name})")

    def __bool__(self) -> bool:
        return False


def _check_json_files(directory: Path) -> None:
    """A truncated or hand-broken JSON file is named with its line and column here, not deep
    inside transformers' loader."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"):
        file = directory / name
        if not file.is_file():
            continue
        try:
            json.loads(file.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(f"{file}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{file}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                             "a truncated copy? copy the checkpoint's tokenizer files again") from None


def has_tokenizer(directory) -> bool:
    """Whether `load_tokenizer(directory)` finds a tokenizer there (files only, nothing read)."""
    directory = Path(directory)
    return any((directory / f).is_file() for f in (BYTE_TOKENIZER_FILE, *_LOADABLE))


def load_tokenizer(directory, required: bool = True):
    """ByteTokenizer if `byte_tokenizer.json` is present, else transformers' AutoTokenizer;
    with neither, an error (`required`) or a `MissingTokenizer` that errors on first use."""
    directory = Path(directory)
    byte_file = directory / BYTE_TOKENIZER_FILE
    if byte_file.is_file():
        data = json.loads(byte_file.read_text())
        if data.get("vocab_size") != BYTE_VOCAB_SIZE:
            raise ValueError(f"{byte_file}: vocab_size {data.get('vocab_size')} != {BYTE_VOCAB_SIZE}")
        return ByteTokenizer(chat_template=data.get("chat_template"))
    if has_tokenizer(directory):
        return HFTokenizer.from_dir(directory)
    if not required:
        return MissingTokenizer(directory)
    raise FileNotFoundError(f"no tokenizer in {directory}: expected {BYTE_TOKENIZER_FILE} or tokenizer.json "
                            f"(or another Hugging Face tokenizer file: {', '.join(_LOADABLE[1:])})")


__all__ = ["BYTE_TOKENIZER_FILE", "HF_TOKENIZER_FILES", "ByteTokenizer", "HFTokenizer",
           "MissingTokenizer", "has_tokenizer", "load_tokenizer", "plain_chat_format"]
