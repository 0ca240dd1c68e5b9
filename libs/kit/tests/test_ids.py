"""Ids: a prefix and a ULID, written as python-ulid (the reference implementation) reads them."""

from __future__ import annotations

import time

import pytest
from ulid import ULID

from coffer_kit.contract import ids


def test_a_new_id_is_a_ulid_of_now() -> None:
    before = time.time()
    made = [ids.new_id(ids.ASSET) for _ in range(1000)]
    after = time.time()
    assert len(set(made)) == len(made)
    for text in made:
        assert ids.is_asset_id(text)
        parsed = ULID.from_str(text.removeprefix("ast_"))
        assert str(parsed) == text.removeprefix("ast_")  # canonical: it writes back the same
        assert before - 0.001 <= parsed.timestamp <= after + 0.001


def test_the_digits_are_the_ulid_encoding_of_the_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bit lands where python-ulid puts it: all zeros, all ones, and each bit alone."""
    for value in [0, 2**128 - 1, *(1 << bit for bit in range(128))]:
        monkeypatch.setattr(ids.time, "time_ns", lambda v=value: (v >> 80) * 1_000_000)
        monkeypatch.setattr(ids.os, "urandom", lambda _n, v=value: (v & (2**80 - 1)).to_bytes(10, "big"))
        monkeypatch.setattr(ids, "_last", -1)  # no id made before
        assert ids.new_id("x") == f"x_{ULID.from_int(value)}"


def test_ids_of_one_millisecond_follow_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """Monotonic within a process: the second id of a millisecond is the first plus 1, whatever
    the random bits say; a later millisecond starts from its own random bits again."""
    monkeypatch.setattr(ids, "_last", -1)
    monkeypatch.setattr(ids.time, "time_ns", lambda: 5_000_000)
    monkeypatch.setattr(ids.os, "urandom", lambda _n: (2**79).to_bytes(10, "big"))
    first = ids.new_id("x")
    monkeypatch.setattr(ids.os, "urandom", lambda _n: (1).to_bytes(10, "big"))
    second = ids.new_id("x")
    assert int(ULID.from_str(second[2:])) == int(ULID.from_str(first[2:])) + 1
    monkeypatch.setattr(ids.time, "time_ns", lambda: 6_000_000)
    assert int(ULID.from_str(ids.new_id("x")[2:])) == 6 << 80 | 1
