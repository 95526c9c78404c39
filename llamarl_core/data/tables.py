"""Rows of a local ``.json``, ``.parquet`` or ``.csv`` file or a ``save_to_disk`` folder, read
through the ``datasets`` library with local loaders only.

Why ``datasets`` and not our own readers: these formats have many dialects (JSON arrays or JSON
lines, Parquet's nested types, CSV quoting) that the library already reads the way users'
tools wrote them. Nothing is downloaded: the packaged ``json``/``csv``/``parquet`` builders and
``load_from_disk`` read the file itself, so ``HF_DATASETS_OFFLINE=1`` changes nothing. Each
read builds its Arrow cache in a temporary folder and keeps the table in memory, so no cache
of a user's file is left in ``~/.cache``. CSV columns are read as text (``007`` stays
``007``; an empty cell is ``""``, not a NaN). JSONL is not read here: ``loaders.py`` reads it
line by line to name the line and column of a bad one.
"""
from __future__ import annotations

import csv
import json
import os
import tempfile

from llamarl_core.data.example import DataFormatError

TABLE_SUFFIXES = (".json", ".parquet", ".csv")
_BUILDER = {".json": "json", ".parquet": "parquet", ".csv": "csv"}
_SPLIT_ALIASES = {"test": ("test", "validation", "valid", "eval"), "train": ("train",)}


def is_table(path: str) -> bool:
    """A file this module reads, or a folder written by ``Dataset(Dict).save_to_disk``."""
    if os.path.isdir(path):
        return any(os.path.exists(os.path.join(path, name))
                   for name in ("dataset_info.json", "dataset_dict.json", "state.json"))
    return path.endswith(TABLE_SUFFIXES)


def saved_split(path: str, split: str) -> str | None:
    """The split of a saved DatasetDict folder that ``read_rows(path, split)`` reads, from its
    ``dataset_dict.json`` (nothing is loaded); None for anything else (one table: both splits)."""
    index = os.path.join(path, "dataset_dict.json")
    if not os.path.isfile(index):
        return None
    with open(index, encoding="utf-8") as f:
        names = json.load(f).get("splits", [])
    found = [name for name in _SPLIT_ALIASES.get(split, (split,)) if name in names]
    return found[0] if found else (names[0] if len(names) == 1 else split)


def read_rows(path: str, split: str) -> list[dict]:
    """Every row as a dict. A saved DatasetDict gives ``split`` (test: test/validation/...)."""
    datasets = _import_datasets(path)
    try:
        if os.path.isdir(path):
            table = _pick_split(datasets.load_from_disk(path, keep_in_memory=True), split, path)
        else:
            suffix = os.path.splitext(path)[1]
            kwargs = _csv_kwargs(path, datasets) if suffix == ".csv" else {}
            with tempfile.TemporaryDirectory(prefix="llamarl-data-") as cache:
                table = datasets.load_dataset(_BUILDER[suffix], data_files=path, split="train",
                                              cache_dir=cache, keep_in_memory=True, **kwargs)
    except DataFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - the library's own message, with the file named
        reason = str(getattr(exc, "__cause__", None) or exc).strip().splitlines()
        raise DataFormatError(f"{path}: not a readable {os.path.splitext(path)[1] or 'dataset folder'} "
                              f"({type(exc).__name__}: {reason[0][:300] if reason else 'no message'})") from None
    return [dict(row) for row in table]


def _import_datasets(path: str):
    try:
        import datasets
    except ImportError:
        raise DataFormatError(f"{path}: reading this format needs the `datasets` package: "
                              f"pip install 'llamarl[data]' (JSONL needs nothing)") from None
    datasets.disable_progress_bars()
    return datasets


def _csv_kwargs(path: str, datasets) -> dict:
    """Every column as text: the header names them (so ``007`` is not read as 7)."""
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), None)
    if not header:
        raise DataFormatError(f"{path}: no header line (an empty CSV file)")
    features = datasets.Features({name: datasets.Value("string") for name in header})
    return {"features": features, "keep_default_na": False, "na_filter": False}


def _pick_split(loaded, split: str, path: str):
    if not hasattr(loaded, "keys"):  # a single Dataset: the caller takes train/test apart
        return loaded
    for name in _SPLIT_ALIASES.get(split, (split,)):
        if name in loaded:
            return loaded[name]
    if len(loaded) == 1:
        return next(iter(loaded.values()))
    raise DataFormatError(f"{path}: a saved DatasetDict with splits {sorted(loaded)}, none of them "
                          f"{split!r}; set data.path/data.eval_path to one split's folder")
