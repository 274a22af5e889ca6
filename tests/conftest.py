"""Fixtures every suite shares: the tiny model folder, the real Qwen tokenizer, a temporary store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollwire.settings import default_home
from rollwire.tiny_model import ensure_tiny_model
from rollwire.tokenizers import QWEN_TOKENIZER, SHARED_ENV, shared_dir


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny default model, built once per machine into the normal cache."""
    return ensure_tiny_model(default_home())


@pytest.fixture(scope="session")
def qwen_tokenizer_files() -> Path:
    """The shared real Qwen tokenizer folder; skips (with the reason) where the shared files are absent."""
    folder = shared_dir() / QWEN_TOKENIZER
    if not (folder / "vocab.json").is_file():
        if os.environ.get("ROLLWIRE_REQUIRE_SHARED"):  # CI: these tests must run, not skip
            pytest.fail(f"shared Qwen tokenizer not found at {folder}")
        pytest.skip(f"shared Qwen tokenizer not found at {folder}; set {SHARED_ENV}")
    return folder


@pytest.fixture()
def store_url(tmp_path: Path) -> str:
    """A fresh SQLite (WAL) store for one test."""
    return f"sqlite:///{tmp_path / 'store.db'}"


def pytest_report_header(config: Any) -> str:
    return f"rollwire shared files: {shared_dir()}"


POSTGRES_ENV = "ROLLWIRE_TEST_POSTGRES_URL"
"""A PostgreSQL server URL (``postgresql+psycopg://user@host:port/db``) the store tests may create databases on."""


def postgres_server_url() -> str:
    """The test server's URL; CI (``ROLLWIRE_REQUIRE_POSTGRES=1`` or ``CI=true``) fails without it, elsewhere the
    Postgres variants skip."""
    url = os.environ.get(POSTGRES_ENV, "")
    if not url:
        required = os.environ.get("ROLLWIRE_REQUIRE_POSTGRES") or os.environ.get("CI", "").lower() in ("1", "true", "yes")
        if required:
            pytest.fail(f"{POSTGRES_ENV} is not set: CI must run the store tests against PostgreSQL")
        pytest.skip(f"no PostgreSQL to test against: set {POSTGRES_ENV} (.ci/postgres starts one)")
    return url


@pytest.fixture()
def postgres_url() -> Iterator[str]:
    """A fresh, empty database on the test PostgreSQL server for one test; dropped afterwards."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import SQLAlchemyError

    server = postgres_server_url()
    name = f"rw_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except SQLAlchemyError as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL at {server.split('@')[-1]} is not usable: {exc.__class__.__name__}: {exc}")
    yield server.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test against a SQLite file and a real PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("postgres_url"))
