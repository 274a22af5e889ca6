"""The bundled engine's wire against real vLLM's: the same /v1/completions requests to both, compared.

Same weights (the tiny model, fp32), so greedy tokens and raw logprobs must agree, and so must the fields the
proxy reads (token_ids, prompt_token_ids, logprobs.token_logprobs/top_logprobs), finish and stop reasons (length,
stop token, stop string, min_tokens, ignore_eos) and the error body's shape. Deliberate differences are listed
in ``SUBSET`` and checked to be exactly those.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

PROMPT = [(7919 * i + 13) % 1000 for i in range(20)]
"""Spread-out ids inside the tiny model's vocabulary (1154 tokens)."""
LOGPROB_TOLERANCE = 1e-3
SUBSET: dict[str, set[str] | set[tuple[str, str]]] = {
    # vLLM-only fields the bundled engine does not produce (nothing in rollwire reads them):
    "top": {"service_tier", "kv_transfer_params", "ec_transfer_params", "metrics"},
    "choice": {"routed_experts"},
    # error "type": the bundled engine uses OpenAI's names (invalid_request_error), vLLM its exception class
    # names (BadRequestError); status, keys and message are alike, and the proxy reads only status and message
    "error_type": {("invalid_request_error", "BadRequestError")},
    # sampling parameters the bundled engine refuses with a 400 naming the parameter (the proxy never sends
    # them); vLLM honours them
    "refused": {"min_tokens"},
}
"""Where the bundled engine deliberately differs from vLLM."""
ADDED = {"weight_version"}
"""Rollwire's own addition to every body and chunk (the policy version that sampled it)."""


def _complete(url: str, **body: Any) -> tuple[int, dict[str, Any]]:
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    reply = httpx.post(f"{url}/v1/completions", json={"model": model, **body}, timeout=120)
    return reply.status_code, reply.json()


@pytest.fixture(scope="module")
def both(engine_url: str, vllm_url: str) -> dict[str, str]:
    return {"bundled": engine_url, "vllm": vllm_url}


def _same_request(both: dict[str, str], **body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    (s1, ours), (s2, theirs) = (_complete(both[k], **body) for k in ("bundled", "vllm"))
    assert s1 == s2 == 200, (ours, theirs)
    return ours, theirs


def test_greedy_tokens_logprobs_and_fields_agree(both: dict[str, str]) -> None:
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.0, "logprobs": 2, "return_token_ids": True}
    ours, theirs = _same_request(both, **body)
    assert set(theirs) - set(ours) == SUBSET["top"] and set(ours) - ADDED <= set(theirs)
    a, b = ours["choices"][0], theirs["choices"][0]
    assert set(b) - set(a) == SUBSET["choice"] and set(a) - ADDED <= set(b)
    assert a["token_ids"] == b["token_ids"] and a["prompt_token_ids"] == b["prompt_token_ids"] == PROMPT
    assert a["logprobs"]["token_logprobs"] == pytest.approx(b["logprobs"]["token_logprobs"], abs=LOGPROB_TOLERANCE)
    assert a["logprobs"]["tokens"] == b["logprobs"]["tokens"]
    for mine, real in zip(a["logprobs"]["top_logprobs"], b["logprobs"]["top_logprobs"], strict=True):
        assert set(mine) == set(real)
        assert [mine[k] for k in real] == pytest.approx(list(real.values()), abs=LOGPROB_TOLERANCE)
    assert (a["finish_reason"], a["stop_reason"]) == (b["finish_reason"], b["stop_reason"]) == ("length", None)
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"] == len(PROMPT)
    assert ours["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"] == 8


def test_stop_token_stop_string_and_min_tokens_end_alike(both: dict[str, str]) -> None:
    greedy: dict[str, Any] = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.0, "return_token_ids": True}
    ours, _ = _same_request(both, **greedy)
    ids, text = ours["choices"][0]["token_ids"], ours["choices"][0]["text"]
    cases: list[dict[str, Any]] = [{"stop_token_ids": [ids[2]]}, {"ignore_eos": True}]
    if text.strip():
        cases.append({"stop": [text.strip()[-1]]})
    for extra in cases:
        ours, theirs = _same_request(both, **greedy, **extra)
        a, b = ours["choices"][0], theirs["choices"][0]
        assert a["token_ids"] == b["token_ids"], extra
        assert a["text"] == b["text"], extra
        assert (a["finish_reason"], a["stop_reason"]) == (b["finish_reason"], b["stop_reason"]), extra


def test_min_tokens_is_refused_clearly_by_the_bundled_engine_and_honoured_by_vllm(both: dict[str, str]) -> None:
    greedy = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.0, "return_token_ids": True}
    first = _complete(both["vllm"], **greedy)[1]["choices"][0]["token_ids"][0]
    body = {**greedy, "stop_token_ids": [first], "min_tokens": 3}
    status, ours = _complete(both["bundled"], **body)
    assert status == 400 and ours["error"]["param"] == "min_tokens" and "min_tokens" in SUBSET["refused"]
    status, theirs = _complete(both["vllm"], **body)
    assert status == 200 and len(theirs["choices"][0]["token_ids"]) >= 3  # the stop token waited for min_tokens


def test_errors_have_the_same_status_and_shape(both: dict[str, str]) -> None:
    for bad in ({"prompt": PROMPT, "max_tokens": 40000}, {"prompt": PROMPT, "max_tokens": 4, "temperature": -1}):
        (s1, ours), (s2, theirs) = (_complete(both[k], **bad) for k in ("bundled", "vllm"))
        assert s1 == s2 == 400, (bad, ours, theirs)
        assert set(ours["error"]) == set(theirs["error"]) >= {"message", "type", "code"}, (ours, theirs)
        assert (ours["error"]["type"], theirs["error"]["type"]) in SUBSET["error_type"], (ours, theirs)
        assert ours["error"]["code"] == theirs["error"]["code"] == 400


def test_streamed_chunks_carry_the_same_fields(both: dict[str, str]) -> None:
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0.0, "logprobs": 0, "return_token_ids": True}
    chunks: dict[str, list[dict[str, Any]]] = {}
    for kind, url in both.items():
        model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        with httpx.stream("POST", f"{url}/v1/completions", json={**body, "model": model, "stream": True}) as reply:
            lines = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "[DONE]"
        chunks[kind] = [json.loads(line) for line in lines[:-1]]
    ids = {k: [t for c in v for ch in c["choices"] for t in ch.get("token_ids") or []] for k, v in chunks.items()}
    assert ids["bundled"] == ids["vllm"]
    first = {k: v[0]["choices"][0] for k, v in chunks.items()}
    assert first["bundled"]["prompt_token_ids"] == first["vllm"]["prompt_token_ids"] == PROMPT
    finishes = {
        k: [ch["finish_reason"] for c in v for ch in c["choices"] if ch["finish_reason"]] for k, v in chunks.items()
    }
    assert finishes["bundled"] == finishes["vllm"] == ["length"]


def _chunks(url: str, **body: Any) -> list[dict[str, Any]]:
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    with httpx.stream("POST", f"{url}/v1/completions", json={**body, "model": model}, timeout=120) as reply:
        lines = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_a_stream_interval_groups_tokens_into_the_same_chunks(both: dict[str, str]) -> None:
    """The first token alone, then ``stream_interval`` tokens a chunk, the rest with the finish: as vLLM sends
    them, with the same ids, logprobs and text offsets in each; and both list the field in /openapi.json."""
    body = {"prompt": PROMPT, "max_tokens": 11, "temperature": 0.0, "logprobs": 1, "return_token_ids": True}
    # ignore_eos: the full 11 tokens from both, so the chunk sizes are known (as the other length tests here)
    chunks = {k: _chunks(url, **body, stream=True, stream_interval=4, ignore_eos=True) for k, url in both.items()}
    parts = {k: [c["choices"][0] for c in v] for k, v in chunks.items()}
    assert (
        [len(p["token_ids"]) for p in parts["bundled"]] == [len(p["token_ids"]) for p in parts["vllm"]] == [1, 4, 4, 2]
    )
    for ours, theirs in zip(parts["bundled"], parts["vllm"]):
        assert ours["token_ids"] == theirs["token_ids"] and ours["text"] == theirs["text"]
        assert ours["finish_reason"] == theirs["finish_reason"]
        a, b = ours["logprobs"], theirs["logprobs"]
        assert a["text_offset"] == b["text_offset"] and a["tokens"] == b["tokens"]
        assert a["token_logprobs"] == pytest.approx(b["token_logprobs"], abs=LOGPROB_TOLERANCE)
    for url in both.values():
        schema = httpx.get(f"{url}/openapi.json", timeout=30).json()["components"]["schemas"]["CompletionRequest"]
        assert "stream_interval" in schema["properties"]
        status, reply = _complete(url, prompt=PROMPT, max_tokens=4, stream_interval=0)
        assert status == 400 and "stream_interval" in reply["error"]["param"], reply  # vLLM: "body.stream_interval"
