"""The model the upstream serves, and the policy version its answers carry: one owner for both. The card is learnt
on first use (the upstream may start after the proxy); the version is the engine's own word where it gives one,
else the one an operator published (``POST /admin/v1/policy_version``, for engines that report none)."""

from __future__ import annotations

import json

from rollwire.errors import NotFound, UpstreamError
from rollwire.proxy.upstream import exchange, takes_stream_interval
from rollwire.proxy.upstream_http import Pool
from rollwire.settings import ProxySettings


class ServedModel:
    def __init__(self, settings: ProxySettings, client: Pool) -> None:
        self.settings = settings
        self.client = client
        self.name: str | None = None
        self.max_model_len: int | None = None
        """From the model card (vLLM and the bundled engine report it); bounds every output cap (``limits``)."""
        self.models = 0
        """How many models the upstream lists; with one, any requested name is answered by it."""
        self.structured_outputs = True
        """False when the model card says the upstream cannot enforce an output format; vLLM's card does not say,
        and vLLM enforces ``structured_outputs``, as the bundled engine does (its card says so)."""
        self.stream_interval = False
        """The upstream takes a per-request ``stream_interval`` (``upstream.takes_stream_interval``)."""
        self.published_version: int | None = None
        """The version an operator published, for engines that cannot report one (real vLLM)."""

    async def served_name(self) -> str:
        """The upstream's model name, its card read on first use."""
        if self.name is None:
            url = self.settings.upstream.rstrip("/") + "/v1/models"
            status, data = await exchange(self.client, "GET", "/v1/models")
            try:
                if status != 200:
                    raise ValueError(f"HTTP {status}")
                cards = json.loads(data)["data"]
                card = cards[0]
                self.models = len(cards)
                self.structured_outputs = card.get("structured_outputs") is not False
                length = card.get("max_model_len")
                self.max_model_len = int(length) if isinstance(length, int) and length > 0 else None
                name = str(card["id"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise UpstreamError(f"cannot list the upstream's models at {url}: {exc.__class__.__name__}") from None
            self.stream_interval = await takes_stream_interval(self.client)
            self.name = name  # last: a call that finds the name set finds the rest learnt too
        return self.name

    async def resolve(self, requested: str) -> str:
        """The served name for ``requested``: an alias, the served name itself, or (unless ``strict_models``)
        any name while the upstream serves just one model; harnesses insist on their own names."""
        served = await self.served_name()
        aliases = self.settings.model_aliases
        target = aliases.get(requested) or (aliases.get("*") if "*" in aliases else None) or requested
        if target == served or (not self.settings.strict_models and self.models == 1):
            return served
        known = "" if self.settings.strict_models else f"; the upstream serves {self.models} models"
        raise NotFound(f"The model `{requested}` does not exist (this proxy serves `{served}`{known}).", param="model")

    def publish(self, version: int) -> None:
        """The policy version the engine's weights are at, for answers the engine does not label."""
        self.published_version = version

    def version(self, reported: int | None) -> int:
        """The policy version of an answer: the engine's own word wins (it knows which weights sampled it; a
        publish can lag or lead the reload it describes), else the published one, else 0."""
        if reported is not None:
            return reported
        return self.published_version if self.published_version is not None else 0


__all__ = ["ServedModel"]
