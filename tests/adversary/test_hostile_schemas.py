"""A rollout reaches the engine's grammar compiler: the output format a harness asks for (``response_format``,
``text.format``, ``output_config.format``) is compiled by the bundled engine. Hostile schemas (deep nesting, a
huge enum, a backtracking pattern, a recursive reference, a long repetition) are each refused (400: the body
reader's nesting limit, or the compiler's) or answered within the output cap, and an honest request sent beside
them is answered: no schema stalls or fails the batch."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app
from rollwire.settings import EngineSettings


def _nested(depth: int) -> str:
    """A schema ``depth`` objects deep, as JSON text (deeper than Python's own encoder would go)."""
    head = '{"type":"object","required":["a"],"properties":{"a":' * depth
    return head + '{"type":"string"}' + "}}" * depth


HOSTILE: dict[str, Any] = {
    "deep": _nested(5000),
    "huge_enum": {"enum": [f"value-{i}" for i in range(20_000)]},
    "backtracking": {"type": "string", "pattern": "^(a+)+$"},
    "recursive_ref": {
        "$defs": {"n": {"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}}, "required": ["n"]}},
        "$ref": "#/$defs/n",
    },
    "long_repeat": {"type": "string", "pattern": "(a|b|c|d|e){1,5000}"},
    "not_a_schema": {"type": 7},
}


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    app = create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path_factory.mktemp("e"))
    with ServerThread(app) as s:
        yield s.url, str(httpx.get(f"{s.url}/v1/models", timeout=30).json()["data"][0]["id"])


def test_hostile_schemas_are_refused_or_bounded_and_the_batch_goes_on(engine: tuple[str, str]) -> None:
    url, model = engine
    answers: dict[str, httpx.Response] = {}

    def ask(name: str, schema: Any) -> None:
        body = json.dumps({"model": model, "prompt": [1, 2, 3], "max_tokens": 16, "seed": 1})
        if schema is not None:
            text = schema if isinstance(schema, str) else json.dumps(schema)
            body = body[:-1] + ', "structured_outputs": {"json": ' + text + "}}"
        headers = {"Content-Type": "application/json"}
        answers[name] = httpx.post(f"{url}/v1/completions", content=body, headers=headers, timeout=120)

    threads = [threading.Thread(target=ask, args=(n, s)) for n, s in [*HOSTILE.items(), ("honest", None)]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = {name: reply.status_code for name, reply in answers.items()}
    assert set(statuses.values()) <= {200, 400}, {n: answers[n].text[:200] for n in statuses}
    assert statuses["honest"] == 200 and statuses["not_a_schema"] == 400 and statuses["deep"] == 400, statuses
    for name, reply in answers.items():
        if reply.status_code == 200:
            assert reply.json()["usage"]["completion_tokens"] <= 16, name
        elif name == "deep":  # refused by the body reader before any parse: past its nesting limit
            assert "nested deeper than" in reply.json()["error"]["message"], reply.text
        else:
            assert reply.json()["error"]["param"] == "structured_outputs", (name, reply.text)
    after = httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": [1, 2], "max_tokens": 2}, timeout=60)
    assert after.status_code == 200
