"""A whole answer's batch of upstream chunks is folded into one chunk per choice: whatever the batch holds
(several choices, logprobs with tokens and top logprobs, a prompt on each choice's first chunk, a bad chunk,
an error, another weight version, a second prompt, an id that is no integer, a null logprob), a reader sees what it would have seen chunk by chunk."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollwire.proxy.upstream import Chunk, _batch, _one_by_one, _request_bytes, _without_echo


def _read(chunks: list[Chunk]) -> dict[str, Any]:
    """What ``LiveGeneration`` keeps of a batch (per choice, as ``_Choice.add`` and a whole answer's ids do)."""
    seen: dict[int, dict[str, Any]] = {}
    versions = []
    for chunk in chunks:
        versions.append(chunk.weight_version)
        for part in chunk.choices:
            kept = seen.setdefault(part.index, {"ids": [], "logprobs": [], "top": [], "tokens": [], "finish": None,
                                                "prompts": []})  # fmt: skip
            kept["ids"] += part.token_ids
            kept["logprobs"] += part.logprobs
            kept["top"] += part.top_logprobs or []
            kept["tokens"] += part.tokens or []
            kept["finish"] = part.finish_reason or kept["finish"]
            if part.prompt_ids is not None:
                kept["prompts"].append(part.prompt_ids)
    return {"choices": seen, "first_version": versions[0] if versions else None}


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    n_choices = draw(st.integers(1, 2))
    length = draw(st.integers(1, 6))
    with_tokens = draw(st.booleans())
    out: list[dict[str, Any]] = []
    for step in range(length):
        for index in range(n_choices):
            ids = draw(st.lists(st.integers(0, 50_000), min_size=0, max_size=2))
            logprobs: dict[str, Any] = {"token_logprobs": [draw(st.floats(-20, 0)) for _ in ids]}
            if with_tokens:
                logprobs["tokens"] = [f"t{i}" for i in ids]
                logprobs["top_logprobs"] = [{f"t{i}": -0.1} for i in ids]
            choice: dict[str, Any] = {"index": index, "text": "", "token_ids": ids, "logprobs": logprobs,
                                      "finish_reason": "stop" if step == length - 1 else None}  # fmt: skip
            if step == 0:
                choice["prompt_token_ids"] = [1, 2, 3]
            out.append({"id": "c", "object": "text_completion", "choices": [choice], "weight_version": 4})
    payloads = [orjson.dumps(data) for data in out]
    spoils = [None, "json", "misaligned", "error", "version", "second prompt", "bad id", "null logprob"]
    spoil = draw(st.sampled_from(spoils))
    if spoil is not None:
        at = draw(st.integers(0, len(out) - 1))
        data = out[at]
        if spoil == "json":
            payloads[at] = payloads[at][:-1]
        elif spoil == "misaligned":
            data["choices"][0]["logprobs"]["token_logprobs"].append(-1.0)
        elif spoil == "error":
            data = {"error": {"message": "engine overloaded"}}
        elif spoil == "bad id":  # converted only at the fold's end: the fold must still fail as the chunk does
            data["choices"][0]["token_ids"] = ["x"]
            data["choices"][0]["logprobs"] = {"token_logprobs": [-1.0]}
        elif spoil == "null logprob":
            data["choices"][0]["token_ids"] = [7]
            data["choices"][0]["logprobs"] = {"token_logprobs": [None]}
        elif spoil == "version":
            data["weight_version"] = 5
        else:
            data["choices"][0]["prompt_token_ids"] = [9]
        if spoil != "json":
            payloads[at] = orjson.dumps(data)
    return payloads


@settings(max_examples=300, deadline=None)
@given(batches())
def test_a_folded_batch_reads_as_the_same_chunks_one_by_one(payloads: list[bytes]) -> None:
    folded, folded_error = _batch(payloads)
    one_by_one, error = _one_by_one(payloads)
    assert _read(folded) == _read(one_by_one)
    assert type(folded_error) is type(error) and str(folded_error) == str(error)


def test_a_clean_batch_is_one_chunk_per_choice() -> None:
    payloads = [
        orjson.dumps({"choices": [{"index": i % 2, "token_ids": [i], "logprobs": {"token_logprobs": [-0.5]}}]})
        for i in range(6)
    ]
    (chunk,), error = _batch(payloads)
    assert error is None
    assert [(p.index, p.token_ids) for p in chunk.choices] == [(0, [0, 2, 4]), (1, [1, 3, 5])]


SENT = [151644, 872, 198, 7, 0]


def _first_chunk(echo: Any, last: bool = False, **layout: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "token_ids": [5], "prompt_token_ids": echo}
    choice = (
        {**choice, "logprobs": {"token_logprobs": [-0.1]}}
        if not last
        else {"logprobs": {"token_logprobs": [-0.1]}, **choice}
    )
    return json.dumps({"choices": [choice]}, **layout).encode()


@pytest.mark.parametrize("at_end", [False, True])
def test_an_echo_of_the_prompt_as_sent_is_not_parsed(at_end: bool) -> None:
    """vLLM echoes the prompt in the compact JSON the proxy sent it in: those bytes parse to exactly the ids sent,
    so the echo is dropped unparsed (wherever it stands in the choice)."""
    prompt = orjson.dumps(SENT)
    payload = _first_chunk(SENT, last=at_end, separators=(",", ":"))
    assert (b'"prompt_token_ids":' + prompt + (b"}" if at_end else b",")) in payload
    kept = _without_echo(payload, prompt)
    assert orjson.loads(kept)["choices"][0]["prompt_token_ids"] is None
    (chunk,), error = _batch([kept])
    assert error is None and chunk.choices[0].prompt_ids is None and chunk.choices[0].token_ids == [5]


@pytest.mark.parametrize(
    "echo",
    [
        SENT[:-1] + [1],  # one id changed
        SENT + [9],  # the prompt and more
        SENT[:-1],  # a prefix of it
        [str(t) for t in SENT],  # the ids as text
    ],
)
def test_any_other_echo_is_left_to_be_parsed_and_compared(echo: list[Any]) -> None:
    prompt = orjson.dumps(SENT)
    payload = _first_chunk(echo, separators=(",", ":"))
    assert _without_echo(payload, prompt) == payload


def test_the_same_ids_in_another_layout_are_parsed_and_compared() -> None:
    """An engine that writes JSON with spaces: its echo is not the bytes sent, so it is parsed (and then equal)."""
    prompt = orjson.dumps(SENT)
    payload = _first_chunk(SENT)
    assert _without_echo(payload, prompt) == payload
    (chunk,), _ = _batch([payload])
    assert chunk.choices[0].prompt_ids == SENT


def test_the_request_carries_the_prompt_bytes_it_reports() -> None:
    body = {"model": 'm "prompt":0', "prompt": SENT, "structured_outputs": {"json": {"prompt": 0}}, "n": 1}
    parts, prompt = _request_bytes(body)
    data = b"".join(parts)
    assert orjson.loads(data) == {**body, "stream": True} and prompt in parts  # sent as is, not copied
    assert prompt == orjson.dumps(SENT) and b'"prompt":' + prompt in data
