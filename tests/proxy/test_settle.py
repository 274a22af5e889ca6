"""What only later calls need (the priors a call teaches, the per-call metrics) is settled after a whole answer
has left, so a client's latency does not carry it; a later call finds every committed call all the same."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, cast

import anyio
import openai
from openai.types.chat import ChatCompletionAssistantMessageParam, ChatCompletionMessageParam

from rollwire.app.serving import ServerThread
from rollwire.proxy.app import create_app
from rollwire.proxy.call import CallPath
from rollwire.proxy.call.record import learn_later
from rollwire.proxy.dialects.registry import READERS
from rollwire.proxy.parsers import reasoning_parser, tool_parser
from rollwire.proxy.recorder import Recorder
from rollwire.proxy.render import Renderer
from rollwire.proxy.splice.plan import PriorCall
from rollwire.proxy.splice.priors import PriorCache
from rollwire.proxy.upstream import make_client
from rollwire.rollouts import RolloutBook
from rollwire.rollouts.budgets import Budgets
from rollwire.settings import ProxySettings
from rollwire.store import encode_ids, open_engine
from rollwire.store.requests import SentRequest
from tests.core.test_store_writer import _full_row
from tests.proxy.asgi_log import SentLog
from tests.proxy.conftest import OPERATOR_KEY, Proxy, admin_client


def test_an_answer_leaves_before_its_call_settles(
    engine_url: str, served_model: str, tiny_model_dir: Path, store_url: str
) -> None:
    """A json answer's last write, then its call's settle; the same for a stream (its last write ends the chunked
    body). The priors are learnt by the time the late listeners run."""
    settings = ProxySettings(upstream=engine_url, model=str(tiny_model_dir))
    app = create_app(settings, store_url, tiny_model_dir.parent, operator_key=OPERATOR_KEY)
    log: list[tuple[Any, ...]] = []
    settled = threading.Semaphore(0)
    app.apps["main"] = SentLog(app.apps["main"], log)
    with ServerThread(app) as server:
        calls = app.state.proxy.calls

        def note(rollout_id: str, _rows: Any) -> None:
            known = calls.splice._known[rollout_id]
            log.append(("settled", len(known.priors)))  # the priors are learnt before any late listener
            settled.release()

        def order() -> list[str]:
            """The log in short: "sent" for an answer's last write, "settled, N held" for a settle."""
            short = [
                f"settled, {e[1]} held" if e[0] == "settled" else "sent" for e in log if e[0] != "body" or not e[2]
            ]
            log.clear()
            return short

        calls.recorder.late_listeners.append(note)
        admin = admin_client(server.urls["admin"])
        rollout = Proxy(server.url, store_url, admin).new_rollout()
        chat = openai.OpenAI(base_url=rollout["base_url"], api_key="unused", max_retries=0)
        first: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hi."}]
        answer = chat.chat.completions.create(model=served_model, messages=first, max_tokens=4, seed=1)
        assert settled.acquire(timeout=30)
        assert order() == ["sent", "settled, 1 held"]
        # the answer, dumped, is the assistant message the next request carries
        said = cast(ChatCompletionAssistantMessageParam, answer.choices[0].message.model_dump(exclude_none=True))
        follow: list[ChatCompletionMessageParam] = [*first, said, {"role": "user", "content": "More."}]
        list(chat.chat.completions.create(model=served_model, messages=follow, max_tokens=4, seed=2, stream=True))
        assert settled.acquire(timeout=30)
        assert order() == ["sent", "settled, 2 held"]
        admin.close()


def test_a_call_not_yet_settled_is_a_prior_all_the_same(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Recording leaves learning a call for later, and the call path's next read of the rollout's earlier calls
    settles it first: a later call never misses a committed one, however late the answer's background task runs."""
    engine = open_engine(f"sqlite:///{tmp_path / 'store.db'}")
    book = RolloutBook(engine)
    book.create_run("run")
    ((rollout, _token),) = book.create("run", 1, {})
    settings = ProxySettings(upstream="http://127.0.0.1:9", shared_store=False)  # priors from memory alone
    recorder = Recorder(engine)
    path = CallPath(
        settings, make_client(settings.upstream, 5.0), Renderer.from_folder(tiny_model_dir), recorder,
        PriorCache(engine, READERS, shared=False), Budgets(engine, "proxy"), tool_parser(settings.tool_parser),
        reasoning_parser(settings.reasoning_parser),
    )  # fmt: skip
    taught: list[int] = []

    def learnt() -> list[PriorCall | None]:
        taught.append(1)
        return [PriorCall(0, (), b"[]", (), [1, 2], [3], 0, False, encode_ids([1, 2]), b"[1,2]", SentRequest(b"{}", 2))]

    async def main() -> None:
        assert await path.earlier_calls(rollout.id) == []  # the rollout is held now, with no calls
        rows = [_full_row(rollout.id)]
        (call_id,) = await recorder.write(rows)
        learn_later(path, rows, [call_id], learnt)
        assert taught == [] and path.splice._known[rollout.id].priors == []  # left for later
        (prior,) = await path.earlier_calls(rollout.id)
        assert (prior.call_id, prior.sampled_ids) == (call_id, [3]) and taught == [1]
        path.settling.settle()  # each call settles once
        assert taught == [1] and len(await path.earlier_calls(rollout.id)) == 1
        await path.close()

    anyio.run(main)
    recorder.close()
    engine.dispose()
