"""``coffer-auth``: serve the auth API, migrate its database, and administer accounts and keys.

Admin commands read the same settings as the service, print one JSON object on stdout,
and report errors on stderr with a non-zero exit. Every change is written to the audit log
with the actor ``operator``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session

from coffer_auth import accounts, admin, audit, invitations, orgs, sessions
from coffer_auth.audit import OPERATOR
from coffer_auth.config import Settings
from coffer_auth.models import Organization, Role, User
from coffer_kit.contract.errors import CofferError, not_found
from coffer_kit.contract.timeutil import isoformat
from coffer_kit.db import make_engine, writer


@functools.cache  # built once: the tests' administration calls main() hundreds of times
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coffer-auth", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the auth service")
    sub.add_parser("migrate", help="create or upgrade the auth database schema")

    p = sub.add_parser("create-org", help="create an organization")
    p.add_argument("--name", required=True)
    p.add_argument("--quota-bytes", type=int, default=None)

    p = sub.add_parser("set-quota", help="change an organization's quota")
    p.add_argument("--org", required=True)
    p.add_argument("--quota-bytes", type=int, required=True)

    p = sub.add_parser(
        "set-default-visibility", help="make an organization's uploads public or private unless they say"
    )
    p.add_argument("--org", required=True)
    p.add_argument("--visibility", choices=["public", "private"], required=True)

    p = sub.add_parser(
        "set-trash-retention", help="days an organization's deleted assets stay in the trash (0: none)"
    )
    p.add_argument("--org", required=True)
    p.add_argument("--days", type=int, required=True)

    p = sub.add_parser(
        "set-ingest", help="an organization's ingest rules: detected types enforced, allowed, scanned"
    )
    p.add_argument("--org", required=True)
    p.add_argument("--ingest", help="record (the default) or enforce")
    p.add_argument(
        "--allowed-types", help="comma-separated media ranges (image/*,application/pdf); '' for any"
    )
    p.add_argument("--scan", help="malware scanning: off (the default), async or block")

    p = sub.add_parser("create-user", help="create a user")
    p.add_argument("--email", required=True)
    p.add_argument("--password", required=True)

    p = sub.add_parser("add-member", help="add a user to an organization")
    p.add_argument("--org", required=True)
    p.add_argument("--user", required=True, help="user id or email")
    p.add_argument("--role", choices=[r.value for r in Role], default=Role.member.value)

    p = sub.add_parser("set-role", help="make a member an owner or a member")
    p.add_argument("--org", required=True)
    p.add_argument("--user", required=True, help="user id or email")
    p.add_argument("--role", choices=[r.value for r in Role], required=True)

    p = sub.add_parser("remove-member", help="remove a user from an organization (never its last owner)")
    p.add_argument("--org", required=True)
    p.add_argument("--user", required=True, help="user id or email")

    p = sub.add_parser("reset-password", help="print a one-time password reset link")
    p.add_argument("--email", required=True)

    p = sub.add_parser("create-invite", help="print an invitation link to an organization")
    p.add_argument("--org", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--role", choices=[r.value for r in Role], default=Role.member.value)

    p = sub.add_parser("revoke-sessions", help="sign a user out of every dashboard session")
    p.add_argument("--user", required=True, help="user id or email")

    p = sub.add_parser("create-key", help="create an organization key, or a user key with --user")
    p.add_argument("--org", required=True)
    p.add_argument("--user", default=None, help="user id or email: a personal key of that user")
    p.add_argument("--name", default="")
    p.add_argument("--expires-in", type=int, default=None, metavar="SECONDS")
    p.add_argument(
        "--scope",
        action="append",
        default=None,
        help="an action (assets:read, ...) or a bundle (full, read-only, uploader); repeatable; default full",
    )
    p.add_argument("--folder-id", default=None, help="confine the key to this folder's subtree")
    p.add_argument(
        "--network", action="append", default=None, help="a CIDR the key may be used from; repeatable"
    )

    p = sub.add_parser("delete-key", help="delete a key")
    p.add_argument("key_id", metavar="KEY_ID")

    p = sub.add_parser("list-keys", help="list an organization's keys")
    p.add_argument("--org", required=True)
    return parser


def _admin(settings: Settings, args: argparse.Namespace, engine: Engine | None) -> dict[str, Any]:
    own = engine is None
    if engine is None:
        engine = make_engine(settings.auth_database_url, pool_size=1, pooler=settings.database_pooler)
    try:
        with Session(writer(engine), expire_on_commit=False) as session:
            result = _COMMANDS[args.command](session, settings, args)
            session.commit()
            return result
    finally:
        if own:
            engine.dispose()


def _create_org(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    quota = settings.auth_default_quota_bytes if args.quota_bytes is None else args.quota_bytes
    org = admin.create_org(session, name=args.name, quota_bytes=quota)
    return {
        "id": org.id,
        "name": org.name,
        "quotaBytes": org.quota_bytes,
        "createdAt": isoformat(org.created_at),
    }


def _set_quota(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    org = admin.set_quota(session, org_id=args.org, quota_bytes=args.quota_bytes)
    return {"id": org.id, "name": org.name, "quotaBytes": org.quota_bytes}


def _set_default_visibility(
    session: Session, _settings: Settings, args: argparse.Namespace
) -> dict[str, Any]:
    org = admin.set_default_visibility(session, org_id=args.org, visibility=args.visibility)
    return {"id": org.id, "name": org.name, "defaultVisibility": org.default_visibility}


def _set_trash_retention(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    org = admin.set_trash_retention(session, org_id=args.org, days=args.days)
    return {"id": org.id, "name": org.name, "trashRetentionDays": org.trash_retention_days}


def _set_ingest(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    allowed: Any = orgs.UNSET
    if args.allowed_types is not None:
        allowed = args.allowed_types.split(",") if args.allowed_types else None
    org = admin.set_ingest(session, org_id=args.org, mode=args.ingest, allowed_types=allowed, scan=args.scan)
    ingest = org.ingest()
    return {
        "id": org.id,
        "name": org.name,
        "ingestMode": ingest.mode,
        "allowedTypes": ingest.allowed_types,
        "scanMode": ingest.scan,
    }


def _create_user(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user = admin.create_user(session, email=args.email, password=args.password)
    return {"id": user.id, "email": user.email, "createdAt": isoformat(user.created_at)}


def _user(session: Session, ref: str) -> User:
    """A user by id, or by email when ``ref`` has an @."""
    user = sessions.user_by_email(session, ref) if "@" in ref else session.get(User, ref)
    if user is None:
        raise not_found(f"User {ref} does not exist.")
    return user


def _add_member(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user = _user(session, args.user)
    m = admin.add_member(session, org_id=args.org, user_id=user.id, role=Role(args.role))
    return {"organizationId": m.organization_id, "userId": m.user_id, "role": m.role}


def _set_role(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user = _user(session, args.user)
    m = orgs.change_role(session, OPERATOR, org_id=args.org, user_id=user.id, role=Role(args.role))
    return {"organizationId": m.organization_id, "userId": m.user_id, "role": m.role}


def _remove_member(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user = _user(session, args.user)
    admin.remove_member(session, org_id=args.org, user_id=user.id)
    return {"organizationId": args.org, "userId": user.id, "removed": True}


def _reset_password(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user = sessions.user_by_email(session, args.email)
    if user is None:
        raise not_found(f"No user has the email {args.email}.")
    reset, token = accounts.create_reset(
        session, user=user, ttl=timedelta(seconds=settings.reset_ttl_seconds), created_by="cli"
    )
    url = f"{settings.dashboard_url}/reset/{token}"
    invitations.log_unsent(url, to=user.email, subject="password reset", mode=settings.mode)
    return {"userId": user.id, "email": user.email, "url": url, "expiresAt": isoformat(reset.expires_at)}


def _create_invite(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    org = session.get(Organization, args.org)
    if org is None:
        raise not_found(f"Organization {args.org} does not exist.")
    inv, token = invitations.create(
        session,
        OPERATOR,
        org=org,
        email=args.email,
        role=Role(args.role),
        invited_by=None,
        ttl=timedelta(seconds=settings.invite_ttl_seconds),
    )
    url = invitations.link(settings.dashboard_url, token)
    invitations.log_unsent(url, to=inv.email, subject="invitation", mode=settings.mode)
    return {
        "id": inv.id,
        "organizationId": org.id,
        "email": inv.email,
        "role": inv.role,
        "url": url,
        "expiresAt": isoformat(inv.expires_at),
    }


def _revoke_sessions(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user = _user(session, args.user)
    revoked = sessions.revoke_all(session, user_id=user.id)
    audit.record_user(session, OPERATOR, "user.sessions_revoked", user, details={"count": revoked})
    return {"userId": user.id, "revoked": revoked}


def _create_key(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user_id = _user(session, args.user).id if args.user else None
    row, secret = admin.create_key(
        session,
        org_id=args.org,
        user_id=user_id,
        name=args.name,
        expires_in=args.expires_in,
        scope_names=args.scope,
        folder_id=args.folder_id,
        networks=args.network,
    )
    return {"key": secret, **admin.key_view(row)}


def _delete_key(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    admin.delete_key(session, key_id=args.key_id)
    return {"id": args.key_id, "deleted": True}


def _list_keys(session: Session, _settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    return {"keys": [admin.key_view(k) for k in admin.list_keys(session, org_id=args.org)]}


_COMMANDS: dict[str, Callable[[Session, Settings, argparse.Namespace], dict[str, Any]]] = {
    "create-org": _create_org,
    "set-quota": _set_quota,
    "set-default-visibility": _set_default_visibility,
    "set-ingest": _set_ingest,
    "set-trash-retention": _set_trash_retention,
    "create-user": _create_user,
    "add-member": _add_member,
    "set-role": _set_role,
    "remove-member": _remove_member,
    "reset-password": _reset_password,
    "create-invite": _create_invite,
    "revoke-sessions": _revoke_sessions,
    "create-key": _create_key,
    "delete-key": _delete_key,
    "list-keys": _list_keys,
}


def main(
    argv: list[str] | None = None, settings: Settings | None = None, engine: Engine | None = None
) -> int:
    """Runs one command. ``engine``, when given, is the auth database's, kept by the caller
    across commands (the test harness runs thousands)."""
    args = _parser().parse_args(argv)
    settings = settings or Settings()
    if args.command == "serve":
        from coffer_auth.main import create_app
        from coffer_kit.logs import configure_logging
        from coffer_kit.serve import Listener, serve

        configure_logging("auth", settings.log_level, settings.log_format)
        serve([Listener(create_app(settings), settings.auth_host, settings.auth_port)])
        return 0
    if args.command == "migrate":
        from coffer_auth.migrations import migrate

        migrate(settings.auth_database_url)
        print(json.dumps({"migrated": True}))
        return 0
    try:
        result = _admin(settings, args, engine)
    except CofferError as exc:
        print(json.dumps({"error": {"code": exc.code, "message": exc.message}}), file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
