"""Which restored objects stay held back for their scan (issue 48): infected always, pending
always (blob holds an infected object before metadata hears of it: a restore that released a
pending one served an infected file until its scan's next round), unscanned under block."""

from __future__ import annotations

import pytest

from coffer_edge.trash import keeps_held


@pytest.mark.parametrize(
    ("status", "mode", "held"),
    [
        ("infected", "async", True),
        ("infected", "block", True),
        ("pending", "async", True),
        ("pending", "block", True),
        ("unscanned", "block", True),
        ("unscanned", "async", False),
        ("clean", "block", False),
        ("clean", "async", False),
        (None, "off", False),
    ],
)
def test_what_a_restore_keeps_held(status: str | None, mode: str, held: bool) -> None:
    assert keeps_held(status, mode) is held
