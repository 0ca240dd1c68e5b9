"""Hooks shared by every test: the order tests start in."""

import pytest

# Started first: under pytest-xdist a long test collected late can be the last one running,
# one worker busy while the other has finished. The schemathesis run is the longest test
# (about 90 s on a slow machine; the next are 10-30 s).
SLOW_FIRST = ("tests/e2e/test_fuzz.py::test_schemathesis_finds_nothing",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(SLOW_FIRST))  # stable: the rest keep their order
