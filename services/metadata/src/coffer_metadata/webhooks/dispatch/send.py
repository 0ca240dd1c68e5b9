"""Send: one signed POST of a delivery, through a resolver that refuses internal addresses,
its answer read within bounds; the client span and the metrics of each attempt
(docs/webhooks.md, "How delivery works"; which addresses are refused: ../safety.py)."""

from __future__ import annotations

import socket
import time
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.webhooks import RESPONSE_KEEP_BYTES
from coffer_kit.tracing import tracer, tracing_enabled
from coffer_metadata.webhooks.dispatch.claim import Job
from coffer_metadata.webhooks.dispatch.record import DELIVERIES, LATENCY, Outcome
from coffer_metadata.webhooks.safety import AddressPolicy, RefusedAddress, literal_address
from coffer_metadata.webhooks.secrets import signatures

USER_AGENT = "Coffer-Webhooks/1"


class PublicOnlyResolver(AbstractResolver):
    """aiohttp's resolver, refusing a host if any address it resolves to is internal (safety.py:
    aiohttp connects to exactly the addresses checked here). Here, not in safety.py: the API's
    processes never load aiohttp."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            self.policy.check(result["host"], name=host)
        return results

    async def close(self) -> None:
        await self._inner.close()


def open_client(policy: AddressPolicy) -> aiohttp.ClientSession:
    """The HTTP client the deliveries go through: every connection resolved by ``policy``."""
    connector = aiohttp.TCPConnector(
        resolver=PublicOnlyResolver(policy), use_dns_cache=False, limit=0, ttl_dns_cache=None
    )
    # trust_env stays off: no proxy from the environment carries a webhook elsewhere.
    return aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT})


async def post(http: aiohttp.ClientSession, job: Job, *, policy: AddressPolicy, timeout: float) -> Outcome:
    """POST the delivery once, signed; an answer must come within ``timeout``. Never follows a
    redirect, reads at most 1 KiB."""
    started_at, start = utcnow(), time.monotonic()
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "webhook-id": job.event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signatures(job.secrets, msg_id=job.event_id, timestamp=timestamp, body=job.body),
    }
    status: int | None = None
    error: str | None = None
    response: str | None = None
    try:
        # The host as aiohttp will read it (yarl's, which makes 127。0。0。1 a literal that it
        # connects to without asking the resolver that checks names), not as urlsplit does; a
        # number in another form than a.b.c.d is refused here (a resolver reads it as one).
        literal = literal_address(URL(job.url).host or "")
        if literal is not None:
            policy.check(literal)
        async with http.post(
            job.url,
            data=job.body,
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as answer:
            status = answer.status
            kept = await _read_some(answer.content, RESPONSE_KEEP_BYTES)
            # As text, on both databases alike: a NUL reads U+FFFD (PostgreSQL's text holds none).
            response = kept.decode("utf-8", "replace").replace("\x00", "\ufffd")
    except TimeoutError:
        error = f"no answer within {timeout:g} s"
    except OSError as exc:  # a refused address (RefusedAddress), and aiohttp's connection errors
        error = _why(exc)
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}"
    except ValueError as exc:  # (UnicodeError too) a URL the sender cannot read, though saved
        error = f"the URL cannot be sent to: {type(exc).__name__}: {exc}"[:500]
    latency = time.monotonic() - start
    LATENCY.observe(latency)
    if status is None:
        DELIVERIES.labels("error").inc()
    elif 200 <= status < 300:
        DELIVERIES.labels("succeeded").inc()
    else:
        DELIVERIES.labels("gone" if status == 410 else "failed").inc()
    return Outcome(status, error and error[:512], response, int(latency * 1000), started_at)


def _why(exc: BaseException) -> str:
    """What made a send fail, in words: a refused address says so (aiohttp wraps it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, RefusedAddress):
            return f"refused: {seen}"
        seen = getattr(seen, "os_error", None) or seen.__cause__
    return str(exc) or type(exc).__name__


async def _read_some(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to ``limit`` bytes of a body; the rest is never read."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class delivery_span:
    """A client span per delivery, linked to the trace of the change that caused it (when
    traced); nothing at all otherwise."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._manager: Any = None

    def __enter__(self) -> Any:
        if not tracing_enabled():
            return None
        from opentelemetry import trace
        from opentelemetry.propagate import extract

        links = []
        if self.job.trace:
            context = trace.get_current_span(extract({"traceparent": self.job.trace})).get_span_context()
            if context.is_valid:
                links.append(trace.Link(context))
        self._manager = tracer.start_as_current_span(
            "webhook deliver",
            kind=trace.SpanKind.CLIENT,
            links=links,
            attributes={
                "coffer.webhook.endpoint_id": self.job.endpoint_id,
                "coffer.webhook.delivery_id": self.job.delivery_id,
                "coffer.webhook.event_type": self.job.event_type,
                "coffer.webhook.attempt": self.job.attempts + 1,
            },
        )
        return self._manager.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._manager is not None:
            self._manager.__exit__(*exc)
