"""The proxy's /metrics (on its admin listener; Prometheus text, read back with the Prometheus client's own parser)
after real traffic from the official openai and anthropic clients: requests by dialect and status, latency split into engine and added
time, calls, tokens, splice reuse and segment breaks, in-flight requests and budget refusals match the store."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionAssistantMessageParam, ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import select

from rollwire.store import ModelCall, Refusal, decode_ids, session_scope
from rollwire.store.db import open_engine
from rollwire.store.prompts import whole_prompts
from tests.proxy.conftest import Proxy


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``url``/metrics, keyed by (sample name, sorted labels)."""
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum of ``name`` over the series whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def test_proxy_metrics_match_the_store(proxy: Proxy, served_model: str) -> None:
    rollout = proxy.new_rollout()
    chat = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
    first: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hi."}]
    answer = chat.chat.completions.create(model=served_model, messages=first, max_tokens=4, seed=1)
    # the answer, dumped, is the assistant message the next request carries
    said = cast(ChatCompletionAssistantMessageParam, answer.choices[0].message.model_dump(exclude_none=True))
    follow: list[ChatCompletionMessageParam] = [*first, said, {"role": "user", "content": "Again."}]
    list(chat.chat.completions.create(model=served_model, messages=follow, max_tokens=4, seed=2, stream=True))
    chat.chat.completions.create(model=served_model, messages=[{"role": "user", "content": "New."}], max_tokens=3)
    chat.responses.create(model=served_model, input="Hello there.", max_output_tokens=3)
    messages = anthropic.Anthropic(base_url=rollout["anthropic_base_url"], api_key="x", max_retries=0)
    messages.messages.create(model=served_model, max_tokens=3, messages=[{"role": "user", "content": "Hi."}])
    with pytest.raises(openai.BadRequestError):
        chat.chat.completions.create(model=served_model, messages=[], max_tokens=3)

    limited = proxy.new_rollout(budgets={"model_calls": 1})
    capped = openai.OpenAI(base_url=limited["base_url"], api_key="unused", max_retries=0)
    capped.chat.completions.create(model=served_model, messages=first, max_tokens=2)
    with pytest.raises(openai.PermissionDeniedError):
        capped.chat.completions.create(model=served_model, messages=first, max_tokens=2)

    samples = scrape(proxy.admin_url)  # the admin listener: rollouts cannot read it
    engine = open_engine(proxy.store_url)
    with session_scope(engine) as session:
        rows = list(session.exec(select(ModelCall)))
        refusals = list(session.exec(select(Refusal)))
    engine.dispose()
    calls = [r for r in rows if r.choice_index == 0]
    by_dialect = Counter((r.dialect, r.status) for r in calls)
    assert by_dialect == {("chat", "complete"): 4, ("responses", "complete"): 1, ("messages", "complete"): 1}
    for (dialect, status), count in by_dialect.items():
        assert total(samples, "rollwire_proxy_model_calls_total", dialect=dialect, status=status) == count
    prompts = [decode_ids(p) for r, p in zip(rows, whole_prompts(rows)) if r.choice_index == 0]
    assert total(samples, "rollwire_proxy_prompt_tokens_total") == sum(len(p) for p in prompts)
    assert total(samples, "rollwire_proxy_sampled_tokens_total") == sum(len(decode_ids(r.completion_ids)) for r in rows)
    reused = sum(r.reused_prefix_len for r in calls)
    assert reused > 0  # the follow-up was spliced onto the first call's ids
    assert total(samples, "rollwire_proxy_reused_prompt_tokens_total") == reused
    assert total(samples, "rollwire_proxy_splice_reuse_ratio_count") == len(calls)
    breaks = [r.segment_break for r in calls if r.segment_break]
    assert breaks and all(b.startswith("history rewritten") for b in breaks)  # the unrelated "New." call
    assert total(samples, "rollwire_proxy_segment_breaks_total", reason="history_rewritten") == len(breaks)

    assert [(r.source, r.kind) for r in refusals] == [("proxy", "model_calls")]
    assert total(samples, "rollwire_proxy_budget_refusals_total", budget="model_calls") == 1
    # HTTP: every generation request by dialect and status; the refusal and the bad body are counted too
    assert total(samples, "rollwire_proxy_http_requests_total", dialect="chat", code="200") == 4
    assert total(samples, "rollwire_proxy_http_requests_total", dialect="chat", code="400") == 1
    assert total(samples, "rollwire_proxy_http_requests_total", dialect="chat", code="403") == 1
    assert total(samples, "rollwire_proxy_http_requests_total", dialect="responses", code="200") == 1
    assert total(samples, "rollwire_proxy_http_requests_total", dialect="messages", code="200") == 1
    assert total(samples, "rollwire_proxy_http_request_duration_seconds_count", dialect="chat") == 6
    # engine time is measured for each call that reached the engine; the rest of the request is added latency
    assert total(samples, "rollwire_proxy_upstream_duration_seconds_count") == len(calls)
    assert total(samples, "rollwire_proxy_added_latency_seconds_count") == len(calls)
    engine_s = total(samples, "rollwire_proxy_upstream_duration_seconds_sum")
    added_s = total(samples, "rollwire_proxy_added_latency_seconds_sum")
    assert engine_s > 0 and added_s > 0
    assert engine_s + added_s <= total(samples, "rollwire_proxy_http_request_duration_seconds_sum") + 1e-6
    assert total(samples, "rollwire_proxy_http_requests_in_flight") == 0
    # bounded labels only: no token, rollout id or run id appears anywhere in the exposition
    text = httpx.get(f"{proxy.admin_url}/metrics", timeout=10).text
    for secret in (rollout["token"], rollout["id"], rollout["run"], limited["token"], limited["id"]):
        assert secret not in text
