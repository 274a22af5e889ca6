"""HTTP front doors of the Responses and Messages dialects: auth, parse, the shared generation path, and
errors rendered in each dialect's own shape (Anthropic clients cannot read OpenAI-shaped errors)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollwire.compact_json import json_text
from rollwire.errors import Forbidden, RollwireError, Unauthorized, UpstreamTimeout
from rollwire.proxy.conversation import Conversation
from rollwire.proxy.dialects.messages import MessagesDialect, parse_messages
from rollwire.proxy.dialects.responses import ResponsesDialect
from rollwire.proxy.dialects.responses_history import expand_previous
from rollwire.proxy.generate import RequestBody
from rollwire.proxy.live import generate_whole, start_live
from rollwire.proxy.sse import EventStreamResponse, until_disconnect
from rollwire.proxy.upstream_http import DEADLINE

logger = logging.getLogger(__name__)

RESPONSES = ResponsesDialect()
MESSAGES = MessagesDialect()
Handler = Callable[[Request], Awaitable[Response]]


def _rendered_errors(dialect: Any, handler: Handler) -> Handler:
    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except RollwireError as exc:
            if exc.status_code >= 500:
                logger.error("proxy error on %s: %s", request.url.path, exc.message)
            headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
            return JSONResponse(dialect.error_body(exc), status_code=exc.status_code, headers=headers)

    return guarded


def _capped(conv: Conversation, cap: int | None) -> Conversation:
    """The operator's output cap for harnesses that never send one (the recorded request stays as sent)."""
    if cap is None or conv.sampling.max_tokens is not None:
        return conv
    return replace(conv, sampling=replace(conv.sampling, max_tokens=cap))


async def answer_response(
    state: Any, caller: Any, conv: Conversation, dialect: Any, raw: dict[str, Any], text: str | None, http: Request
) -> Response:
    """The shared generation path's answer: a JSON body, or the dialect's events streamed as tokens arrive.
    ``text`` is the request body as sent (None when ``raw`` differs from it): stored as is. The rollout's
    budgets admit the call (or refuse it with a recorded reason) and bound its sampled tokens and total time."""
    request = RequestBody(raw, text if text is not None else json_text(raw))
    ticket = await state.budgets.model_call(caller, dialect.name)
    streaming = False
    try:
        left = state.budgets.tokens_left(caller, ticket.use)
        if left is not None and (conv.sampling.max_tokens is None or conv.sampling.max_tokens > left):
            conv = replace(conv, sampling=replace(conv.sampling, max_tokens=left))
        deadline = DEADLINE.set(state.budgets.deadline(caller, None))
        try:
            if not conv.stream:
                gone = partial(until_disconnect, http.receive)
                body = await generate_whole(state.generator, caller, conv, dialect, request, gone)
                status = 200 if body is not None else 499
                after = state.after_answer  # settles the call once the answer has left
                return Response(body or b"", status_code=status, media_type="application/json", background=after)
            live = await start_live(state.generator, caller, conv, dialect, request)
        except UpstreamTimeout as exc:
            if "call_deadline_s" not in caller.budgets:
                raise
            spent = Forbidden(
                f"rollout {caller.rollout_id} ran past its call deadline of {caller.budgets['call_deadline_s']} s "
                f"(budget call_deadline_s; {exc.message}); the generation was stopped"
            )
            raise await state.budgets.refuse(caller, "deadline", dialect.name, spent) from None
        finally:
            DEADLINE.reset(deadline)
        streaming = True
        stream = dialect.stream(_held(live.events(), ticket), conv)
        return EventStreamResponse(stream, live.client_left, background=state.after_answer)
    finally:
        if not streaming:
            ticket.release()


async def _held(events: AsyncIterator[Any], ticket: Any) -> AsyncIterator[Any]:
    """The stream's events; the budget's in-flight slot is given back when the stream ends (or is dropped)."""
    try:
        async for event in events:
            yield event
    finally:
        ticket.release()


def _generate_route(dialect: Any) -> Handler:
    async def route(request: Request) -> Response:
        state = request.app.state.proxy
        caller = await state.auth.caller(request)
        raw, text = await state.read_json_text(request)
        if dialect is RESPONSES:
            expanded = await expand_previous(state.engine, caller.rollout_id, raw)
            raw, text = expanded, (text if expanded is raw else None)
        conv = _capped(dialect.parse_request(raw), state.settings.default_max_output_tokens)
        # the Responses answer gives calls of namespaced tools back with their namespace
        answering = RESPONSES.for_request(raw) if dialect is RESPONSES else dialect
        return await answer_response(state, caller, conv, answering, raw, text, request)

    return _rendered_errors(dialect, route)


def _count(renderer: Any, raw: Any) -> int:
    conv = parse_messages(raw, need_max_tokens=False)
    text = renderer.render([m.to_template() for m in conv.messages], list(conv.tools), True, **conv.template_kwargs())
    return len(renderer.encode(text))


async def _count_tokens(request: Request) -> Response:
    """The prompt's length in the served model's tokens, exactly as the template renders it."""
    state = request.app.state.proxy
    await state.auth.caller(request)
    raw = await state.read_json(request)
    if isinstance(raw, dict) and isinstance(raw.get("model"), str):
        await state.generator.resolve_model(raw["model"])
    count = await anyio.to_thread.run_sync(_count, state.generator.renderer, raw)
    return JSONResponse({"input_tokens": count})


DIALECTS = {
    RESPONSES.name: (RESPONSES.parse_request, RESPONSES.answer_message),
    MESSAGES.name: (MESSAGES.parse_request, MESSAGES.answer_message),
}
"""Request/answer parsers for reading earlier calls back (merged into the app's table)."""


def dialect_routes() -> list[Route]:
    responses = _generate_route(RESPONSES)
    messages = _generate_route(MESSAGES)
    count = _rendered_errors(MESSAGES, _count_tokens)
    out = []
    for prefix in ("/r/{token}/v1", "/v1"):
        out += [
            Route(f"{prefix}/responses", responses, methods=["POST"]),
            Route(f"{prefix}/messages", messages, methods=["POST"]),
            Route(f"{prefix}/messages/count_tokens", count, methods=["POST"]),
        ]
    return out


__all__ = ["DIALECTS", "answer_response", "dialect_routes"]
