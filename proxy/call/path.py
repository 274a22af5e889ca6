"""The call path's owner: one object takes a request any dialect accepted through admission -> prepare -> run ->
record (run records the answer at its end), and answers with a JSON body or the dialect's events streamed as
tokens arrive.

Everything a call needs lives here, built once per process: the engine client, the served model (and the policy
version its answers carry), the template, the parsers, the splice state, the recorder and the budgets."""

from __future__ import annotations

import secrets
from functools import partial

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from rollwire.clients import kept_user_agent
from rollwire.compact_json import json_bytes
from rollwire.proxy.auth import Caller
from rollwire.proxy.cache_salt import CacheSalts
from rollwire.proxy.call.admission import Admission
from rollwire.proxy.call.base import Call, RequestBody
from rollwire.proxy.call.prepare import Prepared, prepare
from rollwire.proxy.call.record import record_engine_failure
from rollwire.proxy.call.run import ENGINE_ERRORS, LiveGeneration, start_live, whole_answer
from rollwire.proxy.call.settle import Settling
from rollwire.proxy.dialects.base import Accepted
from rollwire.proxy.parsers.base import ReasoningParser, ToolParser
from rollwire.proxy.recorder import Recorder
from rollwire.proxy.render import Renderer
from rollwire.proxy.seeds import SampleSeeds
from rollwire.proxy.served import ServedModel
from rollwire.proxy.splice.plan import PriorCall
from rollwire.proxy.splice.priors import PriorCache
from rollwire.proxy.sse import EventStreamResponse, until_disconnect
from rollwire.proxy.upstream_http import Pool
from rollwire.rollouts.budgets import Budgets
from rollwire.settings import ProxySettings


class CallPath:
    def __init__(
        self,
        settings: ProxySettings,
        client: Pool,
        renderer: Renderer,
        recorder: Recorder,
        priors: PriorCache,
        budgets: Budgets,
        tools: ToolParser,
        reasoning: ReasoningParser,
        cache_salts: CacheSalts | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.renderer = renderer
        self.stop_ids = sorted(renderer.end_ids)
        self.recorder = recorder
        self.splice = priors
        """The splice state: each recent rollout's earlier calls (``earlier_calls`` reads it)."""
        self.budgets = budgets
        self.tools = tools
        self.reasoning = reasoning
        self.served = ServedModel(settings, client)
        self.cache_salts = cache_salts or CacheSalts(settings.prefix_cache_scope, secrets.token_bytes(32))
        """Which calls share the engine's cached prefixes: a rollout's own, by default."""
        self.seeds = SampleSeeds(settings.sample_seed) if settings.sample_seed is not None else None
        self.settling = Settling()
        self.after_answer = BackgroundTask(self.settling.after_answer)
        """Every answer's background task: settles the call once its answer has left (one for all)."""

    async def answer(self, caller: Caller, accepted: Accepted, http: Request) -> Response:
        """The request a dialect accepted, answered in that dialect. The body's text as sent is stored as is
        (serialized here only where the dialect changed the body)."""
        dialect, raw, sent = accepted.answering, accepted.body, accepted.sent
        admission, conv = await Admission.admit(
            self.budgets, caller, accepted.conv, dialect.name, self.settings.default_max_output_tokens
        )
        asked = RequestBody(raw, sent if sent is not None else json_bytes(raw))
        call = Call(caller, conv, dialect, asked, kept_user_agent(http.headers.get("user-agent")))
        streaming = False
        try:
            async with admission:
                live = await self._started(call)
                if not conv.stream:
                    body = await whole_answer(live, partial(until_disconnect, http.receive))
                    status = 200 if body is not None else 499
                    return Response(body or b"", status_code=status, media_type="application/json",
                                    background=self.after_answer)  # fmt: skip
            streaming = True
            stream = dialect.stream(admission.held(live.events()), conv)
            return EventStreamResponse(stream, live.client_left, background=self.after_answer)
        finally:
            if not streaming:
                admission.release()

    async def _started(self, call: Call) -> LiveGeneration:
        """The call prepared and its engine stream open. An engine that fails before it samples anything (listing
        its models, or refusing the completion with a 5xx) is recorded for the rollout before the client hears
        of it: the platform's failure, not the policy's."""
        prepared: Prepared | None = None
        try:
            prepared = await prepare(self, call)
            return await start_live(self, call, prepared)
        except ENGINE_ERRORS as exc:
            with anyio.CancelScope(shield=True):
                await record_engine_failure(self, call, prepared, exc.message)
            raise

    async def earlier_calls(self, rollout_id: str) -> list[PriorCall]:
        """The rollout's committed calls as the planner reads them: a call recorded but not yet settled (its
        answer still leaving) is one all the same."""
        self.settling.settle()
        return await self.splice.priors(rollout_id)

    async def close(self) -> None:
        await self.client.close()


__all__ = ["CallPath"]
