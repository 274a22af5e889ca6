"""POST /tokenize and /detokenize with vLLM's bodies: a prompt or chat messages in, ids and counts out."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from jinja2 import TemplateError

from rollwire.engine.model import LanguageModel
from rollwire.engine.protocol import DetokenizeRequest, TokenizeRequest, check_model, check_token_ids
from rollwire.errors import InvalidRequest


def _render_chat(model: LanguageModel, request: TokenizeRequest) -> str:
    kwargs = dict(request.chat_template_kwargs or {})
    try:
        text = model.tokenizer.apply_chat_template(
            request.messages,
            tools=request.tools,
            chat_template=request.chat_template,
            add_generation_prompt=request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            tokenize=False,
            **kwargs,
        )
    except (TemplateError, ValueError, TypeError, KeyError) as exc:  # a template the request's data breaks
        raise InvalidRequest(f"cannot render the chat template: {exc}".splitlines()[0], param="messages")
    return str(text)


def _encode(model: LanguageModel, request: TokenizeRequest) -> list[int]:
    if request.messages is not None:
        text = _render_chat(model, request)
        special = bool(request.add_special_tokens)
    else:
        text = str(request.prompt)
        special = request.add_special_tokens is not False
    return list(model.tokenizer(text, add_special_tokens=special)["input_ids"])


async def tokenize(model: LanguageModel, served_name: str, request: TokenizeRequest) -> dict[str, Any]:
    """``{"count", "max_model_len", "tokens", "token_strs"}``, as vLLM answers."""
    check_model(request.model, served_name)
    if (request.prompt is None) == (request.messages is None):
        raise InvalidRequest("give exactly one of `prompt` or `messages`", param="prompt")
    if request.continue_final_message and request.add_generation_prompt and request.messages is not None:
        raise InvalidRequest(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    ids = await anyio.to_thread.run_sync(_encode, model, request)
    strs = model.tokenizer.convert_ids_to_tokens(ids) if request.return_token_strs else None
    return {"count": len(ids), "max_model_len": model.max_model_len, "tokens": ids, "token_strs": strs}


async def detokenize(model: LanguageModel, served_name: str, request: DetokenizeRequest) -> dict[str, Any]:
    """``{"prompt": text}`` for the given ids (special tokens kept, as vLLM's /detokenize)."""
    check_model(request.model, served_name)
    check_token_ids(request.tokens, model.vocab_size, "tokens")
    text = await anyio.to_thread.run_sync(model.decode_text, request.tokens)
    return {"prompt": text}


__all__ = ["detokenize", "tokenize"]
