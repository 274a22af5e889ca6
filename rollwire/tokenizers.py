"""Load a tokenizer + chat template from a local folder; find the shared real-tokenizer test files.

Nothing here downloads: every path is local, and hub lookups are switched off.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from rollwire.errors import NotFound

SHARED_ENV = "ROLLWIRE_SHARED_DIR"
"""Env var naming the shared test-files folder; defaults to ``../shared`` beside the project root."""

QWEN_TOKENIZER = "tokenizers/qwen2-bpe"


def _project_root() -> Path:
    return Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The shared test-files folder (read-only): ``$ROLLWIRE_SHARED_DIR`` or ``<project>/../shared``."""
    env = os.environ.get(SHARED_ENV)
    return Path(env) if env else _project_root().parent / "shared"


def load_tokenizer(path: str | Path, chat_template: str | None = None) -> Any:
    """A transformers tokenizer from a local folder, optionally with a chat template set on it."""
    from transformers import AutoTokenizer

    folder = Path(path)
    if not folder.is_dir():
        raise NotFound(f"tokenizer folder {folder} does not exist")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def trl_chat_template(name: str) -> str:
    """A real chat template that ships inside the installed ``trl`` package (e.g. ``qwen3``)."""
    resource = importlib.resources.files("trl") / "chat_templates" / f"{name}.jinja"
    if not resource.is_file():
        raise NotFound(f"trl ships no chat template named {name!r}")
    return resource.read_text()


@lru_cache(maxsize=1)
def _qwen_copy() -> Path:
    source = shared_dir() / QWEN_TOKENIZER
    if not (source / "vocab.json").is_file():
        raise NotFound(f"the Qwen tokenizer files are not at {source} (set {SHARED_ENV})")
    target = Path(tempfile.mkdtemp(prefix="rollwire-qwen-")) / "qwen2-bpe"
    shutil.copytree(source, target)  # the source is read-only; loaders may want to write beside it
    for child in target.rglob("*"):
        child.chmod(0o644 if child.is_file() else 0o755)
    return target


def qwen_tokenizer(template: str | None = "qwen3") -> Any:
    """The real Qwen2/3 tokenizer from the shared files, with a trl chat template (``None`` for none)."""
    return load_tokenizer(_qwen_copy(), trl_chat_template(template) if template else None)


def qwen_tokenizer_dir(template: str = "qwen3") -> Path:
    """A writable folder holding the Qwen tokenizer with ``template`` saved into it (for servers that load paths)."""
    target = Path(tempfile.mkdtemp(prefix=f"rollwire-qwen-{template}-"))
    qwen_tokenizer(template).save_pretrained(str(target))
    return target


__all__ = [
    "QWEN_TOKENIZER",
    "SHARED_ENV",
    "load_tokenizer",
    "qwen_tokenizer",
    "qwen_tokenizer_dir",
    "shared_dir",
    "trl_chat_template",
]
