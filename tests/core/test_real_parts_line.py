"""The test run's closing line: the real parts its skips left out, by the words their reasons use."""

from __future__ import annotations

from tests.real_parts import closing_line, part_of


def test_skip_reasons_name_their_real_part() -> None:
    assert part_of("vLLM's CPU build is not installed (`rollwire vllm install`)") == "vLLM's CPU build"
    assert part_of("no PostgreSQL to test against: set ROLLWIRE_TEST_POSTGRES_URL") == "PostgreSQL"
    assert part_of("mini-swe-agent is in neither .venv-harness/mini-swe-agent/bin/python nor this Python") == "mini-swe-agent"
    assert part_of("no kubeconfig at /x/.kube/config: no cluster to run against") == "a Kubernetes cluster"
    assert part_of("no sandbox here: bubblewrap ('bwrap') is not installed") == "bubblewrap"
    assert part_of("needs a CUDA GPU") is None  # not a part this machine can install: not named


def test_the_line_counts_each_part_and_says_what_runs_it() -> None:
    reasons = ["vLLM's CPU build is not installed"] * 2 + ["set ROLLWIRE_TEST_POSTGRES_URL", "no cluster to run against"]
    assert closing_line(reasons) == (
        "real parts not exercised: vLLM's CPU build (2 skipped), PostgreSQL (1 skipped), a Kubernetes cluster "
        "(1 skipped); run by: .ci/run and a machine with a kubeconfig"
    )
    assert closing_line(["needs a CUDA GPU"]) == "real parts: every one this suite uses was exercised"
