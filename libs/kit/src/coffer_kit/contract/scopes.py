"""A key's scopes (issue 46): the actions a route may need, the bundles that name sets of them,
client networks, and the words the dashboard and the CLI describe them with. Defined once,
here: auth stores and checks them, edge enforces them (``coffer_edge.deps``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Literal

from coffer_kit.contract.errors import invalid

Action = Literal[
    "assets:read",
    "assets:write",
    "assets:delete",
    "folders:read",
    "folders:write",
    "urls:sign",
    "upload-tokens:create",
    "usage:read",
    "webhooks:manage",
    "presets:manage",
    "keys:manage",
]
ACTIONS: tuple[Action, ...] = (
    "assets:read",
    "assets:write",
    "assets:delete",
    "folders:read",
    "folders:write",
    "urls:sign",
    "upload-tokens:create",
    "usage:read",
    "webhooks:manage",
    "presets:manage",
    "keys:manage",
)
BUNDLES: dict[str, tuple[Action, ...]] = {
    "full": ACTIONS,
    "read-only": ("assets:read", "folders:read", "urls:sign", "usage:read"),
    "uploader": ("assets:write", "folders:read", "upload-tokens:create"),
}
DEFAULT_SCOPES: tuple[str, ...] = ("full",)
# What an action hands out must not outrun the key: a signed URL reads an asset's bytes, an
# upload token uploads. A key with the first needs the second (refused at creation otherwise).
IMPLIES: dict[str, str] = {"urls:sign": "assets:read", "upload-tokens:create": "assets:write"}
ALL: frozenset[str] = frozenset(ACTIONS)

# Bounds on what a key creation may send (checked before anything is parsed further).
MAX_SCOPES = len(ACTIONS) + len(BUNDLES)
MAX_NETWORKS = 16
MAX_SCOPE_CHARS = 32
MAX_NETWORK_CHARS = 64

# A route's declaration (``x-coffer-action`` in its OpenAPI operation): the action it needs,
# ANY_KEY for a route every valid key may call, TOKEN for one whose credential is an upload
# token or a capability, not a key.
ACTION_EXTENSION = "x-coffer-action"
ANY_KEY = "any-key"
TOKEN = "token"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def normalize(scopes: Sequence[str] | None) -> list[str]:
    """The scopes as stored: each an action or a bundle, without repeats, in a fixed order;
    anything unknown is 400."""
    if scopes is None:
        return list(DEFAULT_SCOPES)
    if len(scopes) > MAX_SCOPES:
        raise invalid(f"At most {MAX_SCOPES} scopes.", field="scopes")
    if not scopes:
        raise invalid("Give at least one scope (an action, or a bundle such as read-only).", field="scopes")
    chosen: set[str] = set()
    for scope in scopes:
        if not isinstance(scope, str) or len(scope) > MAX_SCOPE_CHARS:
            raise invalid("Each scope is an action or a bundle name.", field="scopes")
        if scope not in ALL and scope not in BUNDLES:
            known = ", ".join((*BUNDLES, *ACTIONS))
            raise invalid(f"Unknown scope {scope!r}; known: {known}.", field="scopes")
        chosen.add(scope)
    actions = expand(chosen)
    for action, implied in IMPLIES.items():
        if action in actions and implied not in actions:
            raise invalid(
                f"{action} needs {implied} too: what it hands out can do no more than the key.",
                field="scopes",
            )
    order = [*BUNDLES, *ACTIONS]
    return sorted(chosen, key=order.index)


def expand(scopes: Iterable[str]) -> frozenset[str]:
    """The actions that scopes (actions and bundles) allow; unknown names allow nothing."""
    actions: set[str] = set()
    for scope in scopes:
        if scope in BUNDLES:
            actions.update(BUNDLES[scope])
        elif scope in ALL:
            actions.add(scope)
    return frozenset(actions)


def ordered(actions: Iterable[str]) -> list[str]:
    """Actions in the table's order."""
    given = set(actions)
    return [a for a in ACTIONS if a in given]


def parse_networks(networks: Sequence[str] | None) -> list[str]:
    """CIDRs as stored (canonical text, host bits cleared of nothing: a host bit set is 400)."""
    if not networks:
        return []
    if len(networks) > MAX_NETWORKS:
        raise invalid(f"At most {MAX_NETWORKS} networks.", field="networks")
    parsed: list[str] = []
    for text in networks:
        if not isinstance(text, str) or len(text) > MAX_NETWORK_CHARS:
            raise invalid("Each network is a CIDR such as 203.0.113.0/24.", field="networks")
        try:
            # No IPv6 zone (fe80::1%eth0): a zone is any text, spaces included, and a client's
            # address never carries one; the networks are stored space-separated.
            if "%" in text:
                raise ValueError(text)
            network = ipaddress.ip_network(text.strip(), strict=True)
        except ValueError:
            raise invalid(
                f"{text!r} is not a network (CIDR such as 203.0.113.0/24).", field="networks"
            ) from None
        if str(network) not in parsed:
            parsed.append(str(network))
    return parsed


def networks_of(texts: Iterable[str]) -> tuple[Network, ...]:
    """Stored CIDRs as networks (for the check on every request)."""
    return tuple(ipaddress.ip_network(t, strict=False) for t in texts)


def address_allowed(address: str | None, networks: Sequence[Network]) -> bool:
    """Whether a client address lies in one of the networks (no networks: any address)."""
    if not networks:
        return True
    if address is None:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip.version == n.version and ip in n for n in networks)


def networks_within(inner: Sequence[Network], outer: Sequence[Network]) -> bool:
    """Whether every network of ``inner`` lies inside one of ``outer`` (``outer`` empty: any)."""
    if not outer:
        return True
    if not inner:
        return False
    return all(
        any(i.version == o.version and i.subnet_of(o) for o in outer)  # type: ignore[arg-type]
        for i in inner
    )


_WORDS: dict[str, tuple[str, str]] = {
    # action: (what it lets the key do, the short verb used when it is missing)
    "assets:read": ("read files", "read"),
    "assets:write": ("upload", "upload"),
    "assets:delete": ("delete files", "delete"),
    "folders:read": ("list folders", "list folders"),
    "folders:write": ("change folders", "change folders"),
    "urls:sign": ("sign URLs", "sign URLs"),
    "upload-tokens:create": ("make upload tokens", "make upload tokens"),
    "usage:read": ("see usage", "see usage"),
    "webhooks:manage": ("manage webhooks", "manage webhooks"),
    "presets:manage": ("manage presets", "manage presets"),
    "keys:manage": ("manage keys", "manage keys"),
}


def describe(actions: Iterable[str], *, folder: str | None = None, networks: Sequence[str] = ()) -> str:
    """A key's scopes in words: "can upload into /avatars, list folders; cannot read or delete"."""
    given = set(actions)
    if given >= ALL:
        text = f"can do everything in {folder}" if folder else "can do everything"
    else:
        can = [
            f"upload into {folder}" if action == "assets:write" and folder else _WORDS[action][0]
            for action in ACTIONS
            if action in given
        ]
        text = "can " + ", ".join(can) if can else "can do nothing"
        if folder and can and "assets:write" not in given:
            text += f" in {folder}"
        missing = [_WORDS[a][1] for a in ("assets:read", "assets:write", "assets:delete") if a not in given]
        if missing:
            text += "; cannot " + (
                ", ".join(missing[:-1]) + " or " + missing[-1] if len(missing) > 1 else missing[0]
            )
    if networks:
        text += "; only from " + ", ".join(networks)
    return text


def client_network(address: str | None) -> str:
    """The client a per-address limit counts: an IPv4 address (also mapped into IPv6) as it is,
    an IPv6 one as its /64, which a single host is commonly given whole (counted per address,
    one host had 2^64 fresh addresses to guess from); what is not an address, as it is."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)
