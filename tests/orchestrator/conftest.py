"""Fixtures for the orchestrator suites (their shared helpers are in ``tests.orchestrator.runs``)."""

from __future__ import annotations

import pytest

from rollwire.rollouts import RolloutBook
from rollwire.store.db import open_engine


@pytest.fixture()
def book(store_url: str) -> RolloutBook:
    return RolloutBook(open_engine(store_url))
