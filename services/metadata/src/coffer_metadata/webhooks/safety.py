"""Where webhooks may go (CONTRACT §11, SSRF): https (http where the operator allows it), and a
host that resolves only to public addresses unless the operator allowlists a range.

The check happens where the connection is made: the dispatcher's aiohttp connector resolves
through ``dispatch.send.PublicOnlyResolver``, which refuses internal addresses and hands aiohttp the
addresses it checked, so aiohttp connects to exactly those (no second lookup a rebinding DNS
could answer differently) while keeping the URL's host name for the Host header, TLS SNI and
certificate verification. A URL naming an IP literal is checked before the request (aiohttp
does not resolve literals). Redirects are never followed (the sender passes
``allow_redirects=False``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Ranges refused even where the standard library calls an address global (belt and braces:
# is_global's tables have changed between Python versions).
_ALWAYS_INTERNAL: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # this network
        "10.0.0.0/8",  # RFC 1918
        "100.64.0.0/10",  # carrier-grade NAT (RFC 6598)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
        "172.16.0.0/12",  # RFC 1918
        "192.0.0.0/24",  # IETF protocol assignments
        "192.168.0.0/16",  # RFC 1918
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated, RFC 7526)
        "198.18.0.0/15",  # benchmarking
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",  # unspecified
        "::1/128",  # loopback
        "fc00::/7",  # unique local (ULA)
        "fe80::/10",  # link-local
        "ff00::/8",  # multicast
        "64:ff9b:1::/48",  # local-use NAT64
    )
)


class RefusedAddress(OSError):
    """A webhook URL's host is, or resolves to, an address webhooks may not reach."""


# IPv6 may reach only global unicast (RFC 4291: 2000::/3); everything outside it (IPv4-compatible
# ::a.b.c.d, SIIT ::ffff:0:a.b.c.d, site-local fec0::/10, NAT64, ULA, ...) is refused. Inside
# it, the forms that carry an IPv4 address (6to4 2002::/16, Teredo 2001::/32) are refused whole:
# a tunnel endpoint is never a webhook receiver, and its embedded address could be internal.
_IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_IPV6_EMBEDDING: tuple[ipaddress.IPv6Network, ...] = (
    ipaddress.IPv6Network("2002::/16"),
    ipaddress.IPv6Network("2001::/32"),
)


def _ipv6_refused(address: ipaddress.IPv6Address) -> bool:
    return address not in _IPV6_GLOBAL_UNICAST or any(address in net for net in _IPV6_EMBEDDING)


class AddressPolicy:
    """Which addresses webhooks may reach: public ones, and those of the operator's allowlist."""

    def __init__(self, allow: Sequence[str] = ()) -> None:
        self.allow: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n, strict=False) for n in allow)

    def internal(self, address: IPAddress) -> bool:
        """Whether ``address`` is loopback, private, link-local or otherwise not public."""
        if isinstance(address, ipaddress.IPv6Address) and _ipv6_refused(address):
            return True
        return (
            not address.is_global
            or address.is_multicast
            or any(address in net for net in _ALWAYS_INTERNAL if net.version == address.version)
        )

    def permits(self, address: IPAddress) -> bool:
        if any(address in net for net in self.allow if net.version == address.version):
            return True
        return not self.internal(address)

    def check(self, address: str, *, name: str | None = None) -> None:
        """Refuse ``address`` (text) unless webhooks may reach it; ``name``: the host it was
        resolved from, which the refusal names instead (naming the address would map internal
        DNS names for anyone who may make a webhook)."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone
        if not self.permits(ip):
            what = f"{ip} is" if name is None else f"{name} resolves to"
            raise RefusedAddress(f"{what} an internal address; webhooks may not reach it")


# A host whose last label is a number (decimal, octal, or 0x and hex digits) is an IPv4 address
# to URL parsers (WHATWG's "ends in a number") and to inet_aton, whatever its form: 127.1,
# 2130706433, 0x7f.1 and 017700000001 are each 127.0.0.1. No name ends in one.
_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")


def literal_address(host: str) -> str | None:
    """The host as an IP address if the URL names one (``[::1]`` → ``::1``), else None (a
    name). ``host`` as the sender reads it (yarl's ``URL(url).host``): ``127。0。0。1`` and
    segmented digits (U+1FBF0…) are ASCII there. A number in any other form than a.b.c.d is
    refused (RefusedAddress): it is no name, and only that form is checked as an address."""
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        if _NUMBER.fullmatch(bare.rstrip(".").rpartition(".")[2]):
            raise RefusedAddress(f"{host} is a number but not an IPv4 address written a.b.c.d") from None
        return None
    return bare


def url_problem(url: str, *, allow_http: bool) -> str | None:
    """Why ``url`` cannot be a webhook endpoint (its form only: scheme, host, no credentials),
    or None."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        return "The URL must not contain spaces or control characters."
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "The URL is not valid."
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes:
        return "The URL must use https." if not allow_http else "The URL must use https or http."
    if not parts.hostname:
        return "The URL has no host."
    if parts.username is not None or parts.password is not None:
        return "The URL must not carry credentials."
    if port == 0:
        return "The URL's port is not valid."
    try:
        parts.hostname.encode("idna")
        # ... and as the sender reads it (aiohttp's yarl, stricter: ``xn--a.com`` or a
        # zero-width joiner passed the line above, then failed every send).
        URL(url).host  # noqa: B018
    except ValueError:  # (UnicodeError is one)
        return "The URL's host is not a valid name."
    return None
