"""Hot weight reload and the weight-version label: load a checkpoint beside the live one, swap it in between steps.

Loading happens on a worker thread while the old weights keep serving; the batcher then installs the new ones
once its running batch has drained, so no completion mixes two versions. Reloads are serialized.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import anyio.to_thread

from rollwire.engine.batcher import Batcher
from rollwire.engine.model import LanguageModel, load_weights
from rollwire.errors import InvalidRequest

logger = logging.getLogger(__name__)


class WeightManager:
    """Reloads for one engine; the current version and path live on the model's ``Weights``."""

    def __init__(self, model: LanguageModel, batcher: Batcher) -> None:
        self._model = model
        self._batcher = batcher
        self._lock = asyncio.Lock()

    @property
    def version(self) -> int:
        return self._model.weights.version

    @property
    def path(self) -> Path:
        return self._model.weights.path

    async def reload(self, model_path: str, version: int | None) -> tuple[int, Path]:
        """Load ``model_path`` and make it current; ``version`` None means the current version + 1."""
        if version is not None and version < 0:
            raise InvalidRequest("weight_version must be a non-negative integer", param="weight_version")
        async with self._lock:
            new_version = self.version + 1 if version is None else version
            weights = await anyio.to_thread.run_sync(load_weights, model_path, self._model.device, new_version)
            self._model.check_compatible(weights)
            await asyncio.shield(asyncio.wrap_future(self._batcher.swap(weights)))
            logger.info("serving weight version %d from %s", new_version, weights.path)
            return new_version, weights.path


__all__ = ["WeightManager"]
