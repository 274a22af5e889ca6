"""The context rule at its edges (the HTTP behaviour in every dialect is test_context_limits.py)."""

from __future__ import annotations

import pytest

from rollwire.proxy.limits import ContextExceeded, OutputCap, fit_output


@pytest.mark.parametrize(
    ("requested", "prompt_len", "context", "granted"),
    [
        (64000, 45000, 65536, 20536),  # Claude Code's ceiling: clamped
        (100, 45000, 65536, 100),  # fits: as asked
        (None, 45000, 65536, 20536),  # unset: the rest of the context
        (5, 65535, 65536, 1),  # one token left
        (64000, 45000, None, 64000),  # context unknown: as asked
        (None, 45000, None, None),
    ],
)
def test_fit_output(requested: int | None, prompt_len: int, context: int | None, granted: int | None) -> None:
    cap = fit_output(requested, prompt_len, context)
    assert cap == OutputCap(requested, granted)
    assert cap.clamped is (requested is not None and granted is not None and granted < requested)


@pytest.mark.parametrize("prompt_len", [65536, 70000])
def test_a_prompt_that_fills_the_context_names_both_numbers(prompt_len: int) -> None:
    with pytest.raises(ContextExceeded) as refused:
        fit_output(16, prompt_len, 65536)
    assert refused.value.status_code == 400 and refused.value.code == "invalid_request_error"
    assert (
        f"the prompt is {prompt_len} tokens" in refused.value.message
        and "context is 65536 tokens" in refused.value.message
    )
