"""``coffer-auth``: serve the auth API, migrate its database, and administer accounts and keys.

Admin commands read the same settings as the service, print one JSON object on stdout,
and report errors on stderr with a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from sqlmodel import Session

from coffer_auth import service
from coffer_auth.config import Settings
from coffer_auth.models import Role
from coffer_kit.db import make_engine, writer
from coffer_kit.errors import CofferError
from coffer_kit.timeutil import isoformat


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

    p = sub.add_parser("create-user", help="create a user")
    p.add_argument("--email", required=True)
    p.add_argument("--password", required=True)

    p = sub.add_parser("add-member", help="add a user to an organization")
    p.add_argument("--org", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--role", choices=[r.value for r in Role], default=Role.member.value)

    p = sub.add_parser("remove-member", help="remove a user from an organization")
    p.add_argument("--org", required=True)
    p.add_argument("--user", required=True)

    p = sub.add_parser("create-key", help="create an organization key, or a user key with --user")
    p.add_argument("--org", required=True)
    p.add_argument("--user", default=None)
    p.add_argument("--name", default="")
    p.add_argument("--expires-in", type=int, default=None, metavar="SECONDS")

    p = sub.add_parser("delete-key", help="delete a key")
    p.add_argument("key_id", metavar="KEY_ID")

    p = sub.add_parser("list-keys", help="list an organization's keys")
    p.add_argument("--org", required=True)
    return parser


def _admin(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    engine = make_engine(settings.auth_database_url)
    try:
        with Session(writer(engine), expire_on_commit=False) as session:
            result = _COMMANDS[args.command](session, settings, args)
            session.commit()
            return result
    finally:
        engine.dispose()


def _create_org(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    quota = settings.auth_default_quota_bytes if args.quota_bytes is None else args.quota_bytes
    org = service.create_org(session, name=args.name, quota_bytes=quota)
    return {
        "id": org.id,
        "name": org.name,
        "quotaBytes": org.quota_bytes,
        "createdAt": isoformat(org.created_at),
    }


def _set_quota(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    org = service.set_quota(session, org_id=args.org, quota_bytes=args.quota_bytes)
    return {"id": org.id, "name": org.name, "quotaBytes": org.quota_bytes}


def _create_user(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    user = service.create_user(session, email=args.email, password=args.password)
    return {"id": user.id, "email": user.email, "createdAt": isoformat(user.created_at)}


def _add_member(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    m = service.add_member(session, org_id=args.org, user_id=args.user, role=Role(args.role))
    return {"organizationId": m.organization_id, "userId": m.user_id, "role": m.role}


def _remove_member(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    service.remove_member(session, org_id=args.org, user_id=args.user)
    return {"organizationId": args.org, "userId": args.user, "removed": True}


def _create_key(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    row, secret = service.create_key(
        session, org_id=args.org, user_id=args.user, name=args.name, expires_in=args.expires_in
    )
    return {"key": secret, **service.key_view(row)}


def _delete_key(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    service.delete_key(session, key_id=args.key_id)
    return {"id": args.key_id, "deleted": True}


def _list_keys(session: Session, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    return {"keys": [service.key_view(k) for k in service.list_keys(session, org_id=args.org)]}


_COMMANDS: dict[str, Callable[[Session, Settings, argparse.Namespace], dict[str, Any]]] = {
    "create-org": _create_org,
    "set-quota": _set_quota,
    "create-user": _create_user,
    "add-member": _add_member,
    "remove-member": _remove_member,
    "create-key": _create_key,
    "delete-key": _delete_key,
    "list-keys": _list_keys,
}


def main(argv: list[str] | None = None, settings: Settings | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = settings or Settings()
    if args.command == "serve":
        from coffer_auth.main import create_app
        from coffer_kit.logs import configure_logging
        from coffer_kit.serve import Listener, serve

        configure_logging("auth", settings.log_level)
        serve([Listener(create_app(settings), settings.auth_host, settings.auth_port)])
        return 0
    if args.command == "migrate":
        from coffer_auth.migrations import migrate

        migrate(settings.auth_database_url)
        print(json.dumps({"migrated": True}))
        return 0
    try:
        result = _admin(settings, args)
    except CofferError as exc:
        print(json.dumps({"error": {"code": exc.code, "message": exc.message}}), file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
