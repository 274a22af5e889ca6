"""Each bad input gets its own 4xx with OpenAI's error body, and the engine keeps serving afterwards."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from rollwire.engine.protocol import MAX_LOGPROBS


def _error(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status and error["message"]
    return dict(error)


@pytest.fixture(scope="module")
def client(engine_url: str) -> Any:
    with httpx.Client(base_url=engine_url, timeout=60) as c:
        yield c


def test_unknown_model_is_404(engine_url: str) -> None:
    client = openai.OpenAI(base_url=f"{engine_url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="The model `gpt-nope` does not exist"):
        client.completions.create(model="gpt-nope", prompt=[1, 2], max_tokens=2)


def test_token_id_outside_the_vocabulary(client: httpx.Client) -> None:
    vocab = client.post("/tokenize", json={"prompt": "x"}).json()  # the engine answers; now ask for a huge id
    assert vocab["count"] >= 1
    error = _error(client.post("/v1/completions", json={"prompt": [1, 10**7]}), 400)
    assert "out of vocabulary" in error["message"] and error["param"] == "prompt"
    assert "out of vocabulary" in _error(client.post("/detokenize", json={"tokens": [10**7]}), 400)["message"]


def test_negative_token_id(client: httpx.Client) -> None:
    assert "out of vocabulary" in _error(client.post("/v1/completions", json={"prompt": [3, -1]}), 400)["message"]


def test_prompt_longer_than_the_context(client: httpx.Client) -> None:
    max_len = client.get("/v1/models").json()["data"][0]["max_model_len"]
    error = _error(client.post("/v1/completions", json={"prompt": [5] * (max_len - 3), "max_tokens": 4}), 400)
    assert "maximum context length" in error["message"] and error["param"] == "max_tokens"


def test_malformed_json(client: httpx.Client) -> None:
    reply = client.post("/v1/completions", content=b'{"prompt": [1, 2', headers={"content-type": "application/json"})
    assert "malformed JSON" in _error(reply, 400)["message"]


def test_body_that_is_not_an_object(client: httpx.Client) -> None:
    _error(client.post("/v1/completions", json=[1, 2, 3]), 400)


def test_wrong_field_type(client: httpx.Client) -> None:
    assert (
        _error(client.post("/v1/completions", json={"prompt": [1], "max_tokens": "many"}), 400)["param"] == "max_tokens"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.5),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -2),
        ("n", 0),
        ("max_tokens", 0),
        ("logprobs", -1),
        ("logprobs", MAX_LOGPROBS + 1),
    ],
)
def test_bad_sampling_value(client: httpx.Client, field: str, value: float) -> None:
    error = _error(client.post("/v1/completions", json={"prompt": [1, 2], field: value}), 400)
    assert error["param"] == field and field in error["message"]


def test_empty_prompt(client: httpx.Client) -> None:
    assert _error(client.post("/v1/completions", json={"prompt": []}), 400)["param"] == "prompt"
    assert _error(client.post("/v1/completions", json={"max_tokens": 3}), 400)["param"] == "prompt"


def test_known_but_unsupported_field_is_named(client: httpx.Client) -> None:
    error = _error(client.post("/v1/completions", json={"prompt": [1], "echo": True}), 400)
    assert error["param"] == "echo" and "not supported" in error["message"]


def test_oversized_body_is_413(client: httpx.Client) -> None:
    reply = client.post("/v1/completions", content=b"[" + b"1," * (5 * 1024 * 1024) + b"1]")
    assert _error(reply, 413)["type"] == "request_too_large"


def test_unknown_route_and_method(client: httpx.Client) -> None:
    _error(client.get("/v1/nothing-here"), 404)
    _error(client.get("/v1/completions"), 405)


def test_engine_still_serves_after_errors(client: httpx.Client) -> None:
    body = {"prompt": [1, 2], "max_tokens": 2, "ignore_eos": True}  # two tokens, whatever is sampled
    reply = client.post("/v1/completions", json=body)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2
