"""Adapters are found by name; an unknown name fails with the list of known ones."""

import pytest

from rollwire.errors import NotFound
from rollwire.harness_adapters.base import Adapter
from rollwire.harness_adapters.registry import get_adapter


def test_builtin_reference_adapter() -> None:
    adapter = get_adapter("reference", max_turns=2)
    assert isinstance(adapter, Adapter) and adapter.name == "reference"


def test_unknown_adapter_names_the_known_ones() -> None:
    with pytest.raises(NotFound, match="known: .*reference"):
        get_adapter("no-such-harness")
