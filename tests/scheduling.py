"""The order the two test workers (``-n 2 --dist loadfile``) take files in: the longest first.

xdist hands out whole files, the files with the most tests first. The suite's longest file (the RL command's
kill-and-resume runs, ~15 minutes on CI's 2 cores) holds few tests, so in that order it starts late, and one worker
runs it alone while the other has finished everything else. Taking the longest files first (longest processing
time first) leaves only short files for the end, which the two workers share out.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

LONGEST_FIRST = (
    "tests/rl/test_rl_cli.py",
    "tests/deploy/test_image_assembly.py",
    "tests/core/test_demo_cli.py",
    "tests/proxy/test_smollm2_tokens.py",
    "tests/core/test_model_names.py",
    "tests/core/test_static_checks.py",
    "tests/harness_adapters/test_mcp_replay.py",
    "tests/rl/test_rl_trainer_job.py",
)
"""Files by their time on CI (``--durations``), longest first; every other file follows in xdist's order."""


class LongestFileFirst(LoadFileScheduling):
    """``--dist loadfile``, with the files of ``LONGEST_FIRST`` handed out before any other."""

    def _assign_work_unit(self, node: Any) -> None:
        for scope in LONGEST_FIRST:
            if scope in self.workqueue:
                self.workqueue.move_to_end(scope, last=False)
                break
        super()._assign_work_unit(node)


def make_scheduler(config: Any, log: Any) -> LoadFileScheduling | None:
    """The scheduler for ``--dist loadfile`` (None: xdist's own, for every other mode)."""
    if config.getvalue("dist") != "loadfile" or not hasattr(LoadFileScheduling, "_assign_work_unit"):
        return None
    return LongestFileFirst(config, log)
