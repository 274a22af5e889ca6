"""The two test workers take the longest files first (``tests/scheduling.py``), through xdist's own scheduler."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.scheduling import LONGEST_FIRST, LongestFileFirst

ROOT = Path(__file__).resolve().parents[2]


class _Config:
    """The options the scheduler reads: two local workers, ``--dist loadfile`` (the README's test command), and
    xdist's own ordering of files by their count of tests left on (its default)."""

    option = SimpleNamespace(loadscopereorder=True)

    def getvalue(self, name: str) -> Any:
        return {"tx": ["2*popen"], "dist": "loadfile"}[name]


class _Worker:
    """What the scheduler calls on a worker: the indexes of the tests it is given."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.given: list[int] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.given += indexes

    def shutdown(self) -> None:
        pass


def test_the_files_named_longest_exist() -> None:
    assert [name for name in LONGEST_FIRST if not (ROOT / name).is_file()] == []


def test_the_longest_files_go_out_first_though_they_hold_the_fewest_tests() -> None:
    many = [f"tests/a/test_many.py::test_{i}" for i in range(30)]
    some = [f"tests/b/test_some.py::test_{i}" for i in range(10)]
    longest = [f"{LONGEST_FIRST[0]}::test_{i}" for i in range(2)]
    second = [f"{LONGEST_FIRST[1]}::test_0"]
    collection = many + some + longest + second
    scheduler: Any = LongestFileFirst(_Config())
    workers = [_Worker("gw0"), _Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    # each worker starts with one of the longest files (xdist gives each two files at first, run in order)
    first = [collection[worker.given[0]].split("::")[0] for worker in workers]
    assert first == [LONGEST_FIRST[0], LONGEST_FIRST[1]], first
