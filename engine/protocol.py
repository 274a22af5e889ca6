"""Wire models of the engine's endpoints, with vLLM's field names and defaults, and their translation into
the engine's own ``SamplingParams``.

Unknown fields are accepted (as vLLM's ``OpenAIBaseModel`` does) and reported by name so the app can log them
once; a known vLLM field this engine does not implement gets a 400 naming it when it asks for more than the
neutral value.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollwire.engine.sampling import SamplingParams
from rollwire.errors import InvalidRequest, NotFound

MAX_LOGPROBS = 20
"""Most top logprobs per token, vLLM's default ``--max-logprobs``."""

DEFAULT_MAX_TOKENS = 16
"""vLLM's completions default, also used when the request sends ``"max_tokens": null``."""


class WireModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class StreamOptions(WireModel):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class CompletionRequest(WireModel):
    model: str | None = None
    prompt: list[int] | list[list[int]] | str | list[str] | None = None
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    n: int = 1
    seed: int | None = None
    stop: str | list[str] | None = Field(default_factory=list)
    stop_token_ids: list[int] | None = Field(default_factory=list)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = None
    echo: bool | None = False
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    add_special_tokens: bool = True
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    stream_interval: int | None = None
    """Tokens a streamed chunk may hold (vLLM's per-request field): the first token goes at once, then a chunk
    every this many tokens and at the end. Ignored for non-streamed requests."""
    user: str | None = None
    request_id: str | None = None
    cache_salt: str | None = Field(None, min_length=1, max_length=128)
    """Only requests with the same salt share cached prompt prefixes (vLLM's field): one tenant cannot learn
    another's prompts from how fast its own are answered."""
    # Known vLLM fields this engine does not implement; accepted only at their neutral value.
    suffix: str | None = None
    logit_bias: dict[str, float] | None = None
    best_of: int | None = None
    use_beam_search: bool = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_p: float | None = None
    min_tokens: int = 0
    prompt_logprobs: int | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    prompt_embeds: Any = None
    logprob_token_ids: list[int] | None = None


_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "suffix": (None, ""),
    "logit_bias": (None, {}),
    "best_of": (None, 1),
    "use_beam_search": (False,),
    "presence_penalty": (None, 0.0),
    "frequency_penalty": (None, 0.0),
    "repetition_penalty": (None, 1.0),
    "min_p": (None, 0.0),
    "min_tokens": (0,),
    "prompt_logprobs": (None,),
    "allowed_token_ids": (None,),
    "bad_words": (None, []),
    "response_format": (None, {"type": "text"}),
    "prompt_embeds": (None,),
    "logprob_token_ids": (None,),
    "echo": (None, False),
}


class TokenizeRequest(WireModel):
    """vLLM's two /tokenize bodies in one: a ``prompt`` string or chat ``messages``."""

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool | None = False
    tools: list[dict[str, Any]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(WireModel):
    model: str | None = None
    tokens: list[int]


class ReloadRequest(WireModel):
    model_path: str
    weight_version: int | None = None


def check_model(requested: str | None, served: str) -> None:
    """An empty model name means the served one; any other name must match it (404 otherwise, as vLLM)."""
    if requested and requested != served:
        raise NotFound(f"The model `{requested}` does not exist.", param="model")


def check_token_ids(ids: list[int], vocab_size: int, param: str) -> None:
    bad = next((t for t in ids if t < 0 or t >= vocab_size), None)
    if bad is not None:
        raise InvalidRequest(f"Token id {bad} is out of vocabulary (vocabulary size {vocab_size}).", param=param)


def _check_unsupported(request: CompletionRequest) -> None:
    for name, neutral in _NEUTRAL.items():
        if getattr(request, name) not in neutral:
            raise InvalidRequest(f"`{name}` is not supported by this engine", param=name)


def _check_ranges(request: CompletionRequest) -> None:
    if request.temperature is not None and request.temperature < 0:
        raise InvalidRequest(f"temperature must be non-negative, got {request.temperature}.", param="temperature")
    if request.top_p is not None and not 0 < request.top_p <= 1:
        raise InvalidRequest(f"top_p must be in (0, 1], got {request.top_p}.", param="top_p")
    if request.top_k is not None and request.top_k < -1:
        raise InvalidRequest(f"top_k must be -1 (disable), or at least 1, got {request.top_k}.", param="top_k")
    if request.n < 1:
        raise InvalidRequest(f"n must be at least 1, got {request.n}.", param="n")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be at least 1, got {request.max_tokens}.", param="max_tokens")
    if request.logprobs is not None and not 0 <= request.logprobs <= MAX_LOGPROBS:
        raise InvalidRequest(
            f"logprobs must be between 0 and {MAX_LOGPROBS}, got {request.logprobs}.", param="logprobs"
        )
    if request.stream_interval is not None and request.stream_interval < 1:
        raise InvalidRequest(
            f"stream_interval must be at least 1, got {request.stream_interval}.", param="stream_interval"
        )
    if request.stream_options is not None and not request.stream:
        raise InvalidRequest("Stream options can only be defined when `stream=True`.", param="stream_options")


def validate_completion(request: CompletionRequest) -> None:
    """Every check that does not need the prompt's length; raises InvalidRequest naming the field."""
    _check_unsupported(request)
    _check_ranges(request)
    prompt = request.prompt
    if prompt is None or prompt == "" or prompt == []:
        raise InvalidRequest("Either prompt or prompt_embeds must be provided and non-empty.", param="prompt")
    if isinstance(prompt, list) and any(p == "" or p == [] for p in prompt):
        raise InvalidRequest("Every prompt in the list must be non-empty.", param="prompt")


def sampling_params(
    request: CompletionRequest, prompt_len: int, max_model_len: int, grammar: str | None = None
) -> SamplingParams:
    """The engine's SamplingParams for one prompt; a prompt + max_tokens past the context is a 400. ``grammar``:
    the request's ``structured_outputs``, compiled (``grammar.Grammars``)."""
    max_tokens = request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS  # vLLM: null -> 16
    if prompt_len + max_tokens > max_model_len:
        raise InvalidRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {prompt_len} input tokens, for a total of "
            f"{prompt_len + max_tokens} tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens.",
            param="max_tokens" if prompt_len < max_model_len else "prompt",
        )
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    top_k = request.top_k if request.top_k is not None and request.top_k > 0 else 0
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=top_k,
        seed=request.seed,
        stop=tuple(s for s in stop if s),
        stop_token_ids=frozenset(request.stop_token_ids or ()),
        ignore_eos=request.ignore_eos,
        logprobs=request.logprobs,
        include_stop_str_in_output=request.include_stop_str_in_output,
        skip_special_tokens=request.skip_special_tokens,
        grammar=grammar,
    )


__all__ = [
    "MAX_LOGPROBS",
    "CompletionRequest",
    "DetokenizeRequest",
    "ReloadRequest",
    "StreamOptions",
    "TokenizeRequest",
    "check_model",
    "check_token_ids",
    "sampling_params",
    "validate_completion",
]
