"""What an upstream server sends the gateway's client, relayed to the harness and recorded: progress, log
messages, resource and list-change notifications, and its sampling, elicitation and roots requests (sent on to
the harness as the gateway's own requests, their answers sent back). Each upstream connection has one relay."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata

from rollwire.mcp_servers.gateway.messages import MessageLog
from rollwire.mcp_servers.gateway.rounds import Rounds

log = logging.getLogger(__name__)

UPSTREAM_IN = "upstream->harness"
HARNESS_BACK = "harness->upstream"


def deprecated_call(method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Awaitable[Any]:
    """A call the SDK marks deprecated for 2026-07-28 (logging, roots, subscriptions) but that 2025-era harnesses
    and servers use: made without the warning (only the call is wrapped, the await runs outside)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return method(*args, **kwargs)


def declared(session: ServerSession | None) -> types.ClientCapabilities:
    """What the harness said it can do (sampling, elicitation, roots): the upstream is told the same."""
    caps = session.client_capabilities if session is not None else None
    return caps or types.ClientCapabilities()


class Relay:
    """The harness side of one upstream connection: the harness requests in flight on it (an upstream's request
    or notification belongs to the newest), and the harness's last session for what comes outside any request."""

    def __init__(self, rollout_id: str, server: str, messages: MessageLog) -> None:
        self.rollout_id, self.server, self.messages = rollout_id, server, messages
        self._active: list[ServerRequestContext[Any, Any] | Rounds] = []
        self.session: ServerSession | None = None
        self.on_list_changed: list[Any] = []
        """Called (no arguments) when the upstream says its tools, prompts or resources changed."""

    @contextmanager
    def serving(self, target: ServerRequestContext[Any, Any] | Rounds) -> Iterator[None]:
        """Relay to ``target`` while the block runs: a harness request, or a call's input-required rounds."""
        self._active.append(target)
        self.session = target.ctx.session if isinstance(target, Rounds) else target.session
        try:
            yield
        finally:
            self._active.remove(target)

    def _rounds(self) -> Rounds | None:
        target = self._active[-1] if self._active else None
        return target if isinstance(target, Rounds) else None

    def _current(self) -> ServerRequestContext[Any, Any] | None:
        target = self._active[-1] if self._active else None
        return target.ctx if isinstance(target, Rounds) else target

    def _record(self, direction: str, kind: str, method: str, body: Any, request_id: Any = None) -> None:
        self.messages.add(self.rollout_id, direction, kind, method, body, self.server, request_id)

    # -- server -> client requests -------------------------------------------------------------------------

    async def _ask(self, request: Any, result_type: type[Any], needs: types.ClientCapabilities) -> Any:
        method = request.method
        params = request.params.model_dump(mode="json", by_alias=True, exclude_none=True) if request.params else {}
        self._record(UPSTREAM_IN, "request", method, params)
        rounds = self._rounds()
        if rounds is not None and rounds.ctx.session.check_client_capability(needs):
            answer = await rounds.ask(request)
            kind = "error" if isinstance(answer, types.ErrorData) else "response"
            self._record(HARNESS_BACK, kind, method, answer.model_dump(mode="json", by_alias=True, exclude_none=True))
            return answer
        ctx = self._current()
        session = ctx.session if ctx is not None else self.session  # outside a request: the harness's session
        if session is None or not session.check_client_capability(needs):
            why = "no harness is connected" if session is None else "the harness did not declare it"
            error = types.ErrorData(code=types.METHOD_NOT_FOUND, message=f"{method} is not available: {why}")
            self._record(HARNESS_BACK, "error", method, error.model_dump(mode="json", exclude_none=True))
            return error
        related = ServerMessageMetadata(related_request_id=ctx.request_id) if ctx is not None else None
        try:
            result = await session.send_request(request, result_type, metadata=related)
        except MCPError as exc:
            self._record(HARNESS_BACK, "error", method, exc.error.model_dump(mode="json", exclude_none=True))
            return exc.error
        except Exception as exc:  # noqa: BLE001 - the harness cannot answer (no back-channel, it left): tell the upstream
            error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"the harness did not answer {method}: {exc}")
            self._record(HARNESS_BACK, "error", method, error.model_dump(mode="json", exclude_none=True))
            return error
        self._record(HARNESS_BACK, "response", method, result.model_dump(mode="json", by_alias=True, exclude_none=True))
        return result

    async def sampling(self, _context: Any, params: types.CreateMessageRequestParams) -> Any:
        with_tools = bool(params.tools)
        result_type = types.CreateMessageResultWithTools if with_tools else types.CreateMessageResult
        need = types.ClientCapabilities(sampling=types.SamplingCapability())
        return await self._ask(types.CreateMessageRequest(params=params), result_type, need)

    async def elicitation(self, _context: Any, params: types.ElicitRequestParams) -> Any:
        need = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        return await self._ask(types.ElicitRequest(params=params), types.ElicitResult, need)

    async def list_roots(self, _context: Any) -> Any:
        need = types.ClientCapabilities(roots=types.RootsCapability())
        return await self._ask(types.ListRootsRequest(), types.ListRootsResult, need)

    # -- notifications -------------------------------------------------------------------------------------

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        body = {"progress": progress, "total": total, "message": message}
        self._record(UPSTREAM_IN, "notification", "notifications/progress", body)
        ctx = self._current()
        if ctx is not None:
            await ctx.session.report_progress(progress, total, message)

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self._record(UPSTREAM_IN, "notification", "notifications/message", params.model_dump(mode="json", exclude_none=True))
        ctx = self._current()
        session, related = (ctx.session, ctx.request_id) if ctx is not None else (self.session, None)
        if session is None:
            return
        try:
            await deprecated_call(session.send_log_message, params.level, params.data, params.logger, related_request_id=related)
        except Exception as exc:  # noqa: BLE001 - the harness left: the log line stays recorded
            log.debug("log message not relayed: %s", exc)

    async def notification(self, message: Any) -> None:
        """Resource updates and list changes from the upstream (the SDK's message handler)."""
        if isinstance(message, Exception):
            log.debug("upstream %s sent something unreadable: %s", self.server, message)
            return
        if isinstance(message, types.LoggingMessageNotification | types.ProgressNotification):
            return  # relayed by ``logging`` and ``progress``
        body = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        self._record(UPSTREAM_IN, "notification", body.get("method", ""), body.get("params") or {})
        session = self.session
        try:
            if isinstance(message, types.ResourceUpdatedNotification) and session is not None:
                await session.send_resource_updated(message.params.uri)
            elif isinstance(
                message,
                types.ToolListChangedNotification | types.PromptListChangedNotification | types.ResourceListChangedNotification,
            ):
                for callback in self.on_list_changed:
                    callback()
                if session is not None:
                    await session.send_notification(message)
        except Exception as exc:  # noqa: BLE001 - the harness left: the notification stays recorded
            log.debug("notification not relayed: %s", exc)

    def client_options(self, caps: types.ClientCapabilities) -> dict[str, Any]:
        """The SDK client's callbacks: the upstream sees the capabilities the harness declared, no more."""
        options: dict[str, Any] = {"logging_callback": self.logging, "message_handler": self.notification}
        if caps.sampling is not None:
            options["sampling_callback"] = self.sampling
        if caps.elicitation is not None:
            options["elicitation_callback"] = self.elicitation
        if caps.roots is not None:
            options["list_roots_callback"] = self.list_roots
        return options


__all__ = ["HARNESS_BACK", "UPSTREAM_IN", "Relay", "declared", "deprecated_call"]
