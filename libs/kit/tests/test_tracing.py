"""The sampler's probe and the unsampled request's context (issue 28: a span the sampler is
known to drop is not made). Real SDK samplers and tracer providers, not installed globally."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    ParentBasedTraceIdRatio,
    Sampler,
    TraceIdRatioBased,
)

from coffer_kit import tracing


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    saved = (tracing._drops_under_unsampled, tracing._drops_roots, tracing._new_ids)
    yield
    tracing._drops_under_unsampled, tracing._drops_roots, tracing._new_ids = saved


@pytest.mark.parametrize(
    ("sampler", "under_unsampled", "roots"),
    [
        (ALWAYS_OFF, True, True),
        (DEFAULT_OFF, True, True),  # parentbased_always_off
        (DEFAULT_ON, True, False),  # parentbased_always_on, the default
        (ParentBasedTraceIdRatio(0.5), True, False),  # a root's decision depends on its trace id
        (ALWAYS_ON, False, False),
        (TraceIdRatioBased(0.5), False, False),
    ],
)
def test_the_probe_learns_what_the_sampler_always_drops(
    sampler: Sampler, under_unsampled: bool, roots: bool
) -> None:
    tracing._learn_sampler(TracerProvider(sampler=sampler))
    assert (tracing._drops_under_unsampled, tracing._drops_roots) == (under_unsampled, roots)


def scope(*headers: tuple[bytes, bytes]) -> dict[str, object]:
    return {"type": "http", "path": "/api/assets/x", "headers": [(b"host", b"edge"), *headers]}


def test_an_unsampled_caller_is_served_in_its_own_context() -> None:
    tracing._learn_sampler(TracerProvider(sampler=DEFAULT_ON))
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    context = tracing.unsampled_context(scope((b"traceparent", f"00-{trace_id}-{span_id}-00".encode())))
    assert context is not None
    carried = trace.get_current_span(context).get_span_context()
    assert (format(carried.trace_id, "032x"), format(carried.span_id, "016x")) == (trace_id, span_id)
    assert not carried.trace_flags.sampled


def test_a_sampled_caller_or_a_sampled_root_gets_a_span() -> None:
    tracing._learn_sampler(TracerProvider(sampler=DEFAULT_ON))
    sampled = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01".encode()
    assert tracing.unsampled_context(scope((b"traceparent", sampled))) is None
    assert tracing.unsampled_context(scope()) is None  # a root: the sampler samples it


def test_a_dropped_root_gets_a_new_unsampled_trace() -> None:
    tracing._learn_sampler(TracerProvider(sampler=ALWAYS_OFF))
    first, second = (tracing.unsampled_context(scope()) for _ in range(2))
    assert first is not None and second is not None
    one, two = (trace.get_current_span(c).get_span_context() for c in (first, second))
    assert one.is_valid and two.is_valid and one.trace_id != two.trace_id
    assert not one.trace_flags.sampled
    # A malformed traceparent is no parent: a new trace too.
    context = tracing.unsampled_context(scope((b"traceparent", b"00-zz-zz-00")))
    assert context is not None and trace.get_current_span(context).get_span_context().is_valid


def test_a_ratio_samplers_roots_are_left_to_the_tracer() -> None:
    tracing._learn_sampler(TracerProvider(sampler=ParentBasedTraceIdRatio(0.5)))
    assert tracing.unsampled_context(scope()) is None
    unsampled = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00".encode()
    assert tracing.unsampled_context(scope((b"traceparent", unsampled))) is not None
