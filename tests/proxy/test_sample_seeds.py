"""``SampleSeeds``: the seed an unseeded request gets depends on the run seed, its prompt and that prompt's count;
through the proxy (``sample_seed``) the same unseeded requests sample the same answers again, on real engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
from sqlmodel import Session, select

from rollwire.proxy.seeds import SEED_BITS, SampleSeeds
from rollwire.store import ModelCall, open_engine
from tests.proxy.conftest import Proxy


def test_the_same_prompts_in_the_same_order_get_the_same_seeds() -> None:
    prompts = [[1, 2, 3], [4, 5], [1, 2, 3], [6]]
    first, again = SampleSeeds(7), SampleSeeds(7)
    seeds = [first.for_prompt(p) for p in prompts]
    assert seeds == [again.for_prompt(p) for p in prompts]
    assert all(0 <= seed < 1 << SEED_BITS for seed in seeds)


def test_a_repeated_prompt_gets_a_new_seed_each_time() -> None:
    seeds = SampleSeeds(7)
    group = [seeds.for_prompt([1, 2, 3]) for _ in range(8)]  # a GRPO group's first calls
    assert len(set(group)) == 8


def test_other_prompts_between_change_nothing() -> None:
    alone, busy = SampleSeeds(7), SampleSeeds(7)
    expected = [alone.for_prompt([1, 2, 3]) for _ in range(3)]
    got = []
    for other in range(3):
        busy.for_prompt([9, other])
        got.append(busy.for_prompt([1, 2, 3]))
    assert got == expected


def test_the_run_seed_and_the_prompt_both_count() -> None:
    assert SampleSeeds(7).for_prompt([1, 2, 3]) != SampleSeeds(8).for_prompt([1, 2, 3])
    assert SampleSeeds(7).for_prompt([1, 2, 3]) != SampleSeeds(7).for_prompt([1, 2, 4])


def test_the_table_of_counts_is_bounded() -> None:
    seeds = SampleSeeds(7, remembered=2)
    first = seeds.for_prompt([1])
    seeds.for_prompt([2])
    seeds.for_prompt([3])  # [1] is forgotten: its count starts again
    assert seeds.for_prompt([1]) == first


def _unseeded_answers(proxy: Proxy, model: str, prompts: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """One rollout asking each prompt at T=1 with no seed (as a harness at its defaults does), twice the first."""
    rollout = proxy.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key="x", max_retries=0)
    answers = []
    for prompt in [prompts[0], *prompts]:
        out = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=12, temperature=1.0
        )
        answers.append(out.choices[0].message.content or "")
    with Session(open_engine(proxy.store_url)) as session:
        rows = session.exec(select(ModelCall).where(ModelCall.rollout_id == rollout["id"])).all()
        sampling = [dict(row.sampling or {}) for row in sorted(rows, key=lambda row: row.started_ns)]
    return answers, sampling


def test_a_run_seed_replays_unseeded_samples_on_a_real_engine(
    start_proxy: Callable[..., Proxy], any_engine_url: str
) -> None:
    """Two proxies with one ``sample_seed`` in front of one engine (the bundled one, then real vLLM) sample
    the same answers for the same unseeded requests; the seed each call was sent with is recorded."""
    model = str(httpx.get(f"{any_engine_url}/v1/models", timeout=30).json()["data"][0]["id"])
    prompts = ["Tell me about the sea.", "Name a colour.", "Count to five."]
    first, recorded = _unseeded_answers(start_proxy(any_engine_url, sample_seed=11), model, prompts)
    again, replayed = _unseeded_answers(start_proxy(any_engine_url, sample_seed=11), model, prompts)
    assert first == again and recorded == replayed
    seeds = [sampling["seed"] for sampling in recorded]
    assert len(set(seeds)) == len(seeds)  # the repeated first prompt drew a seed of its own
    other, _ = _unseeded_answers(start_proxy(any_engine_url, sample_seed=12), model, prompts)
    assert other != first  # another run seed samples otherwise (at T=1, 4 answers of 12 tokens)
    _, unseeded = _unseeded_answers(start_proxy(any_engine_url, sample_seed=None), model, prompts)
    assert all("seed" not in sampling for sampling in unseeded)  # without one, the engine's own randomness
