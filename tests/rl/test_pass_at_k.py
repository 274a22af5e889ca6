"""pass@k (unbiased, without replacement) and pass^k, against counts worked out by hand."""

from __future__ import annotations

import pytest

from rollwire.errors import InvalidRequest
from rollwire.pass_rates import pass_at_k, pass_hat_k, suite_pass_rates


def test_pass_at_k_by_hand() -> None:
    # n = 4 rollouts, c = 1 passed: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2; pass@4 = 1
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4) == pytest.approx(1.0)
    assert pass_at_k(4, 0, 3) == 0.0


def test_pass_hat_k_by_hand() -> None:
    # n = 4, c = 3: pass^1 = 3/4; pass^2 = C(3,2)/C(4,2) = 3/6; pass^4 = 0 (one of the four fails)
    assert pass_hat_k(4, 3, 1) == pytest.approx(0.75)
    assert pass_hat_k(4, 3, 2) == pytest.approx(0.5)
    assert pass_hat_k(4, 3, 4) == 0.0
    assert pass_hat_k(4, 4, 4) == 1.0


def test_a_suite_averages_its_tasks_and_only_full_marks_pass() -> None:
    rates = suite_pass_rates({"a": [1.0, 0.0], "b": [1.0, 1.0, 0.5]})  # b: 0.5 is partial credit, not a pass
    # k = 1, 2 (the smallest n): a: n=2 c=1, b: n=3 c=2
    assert rates["pass@1"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert rates["pass@2"] == pytest.approx((1.0 + (1 - 0 / 3)) / 2)  # b: C(1,2) = 0
    assert rates["pass^2"] == pytest.approx((0.0 + 1 / 3) / 2)  # a: C(1,2)=0; b: C(2,2)/C(3,2) = 1/3
    assert set(rates) == {"pass@1", "pass^1", "pass@2", "pass^2"}


def test_impossible_counts_are_refused() -> None:
    with pytest.raises(InvalidRequest):
        pass_at_k(2, 3, 1)
    with pytest.raises(InvalidRequest):
        pass_at_k(2, 1, 3)
