"""The refusals of auth's dashboard API: one constructor per code, each with its status."""

from __future__ import annotations

from typing import Any

from coffer_kit.contract.errors import CofferError, forbidden, rate_limited, unauthorized

# Codes of auth's internal dashboard API beyond the contract's (INTERNAL_API.md): one
# constructor each, carrying its status, like coffer_kit.contract.errors.


def wrong_credentials() -> CofferError:
    """The one answer to a failed sign-in, whichever part was wrong (no enumeration)."""
    return unauthorized("Wrong email or password.")


def wrong_password() -> CofferError:
    return CofferError(400, "wrong_password", "The password is wrong.", details={"field": "password"})


def weak_password(message: str, details: dict[str, Any]) -> CofferError:
    return CofferError(400, "weak_password", message, details={"field": "password", **details})


def throttled(retry_after: int) -> CofferError:
    error = rate_limited(f"Too many attempts. Try again in {retry_after} s.", retry_after=retry_after)
    error.details = {"retryAfter": retry_after}
    return error


def reauth_required() -> CofferError:
    return CofferError(403, "reauth_required", "Enter your password again to continue.")


def owners_only(message: str = "Only an owner of the organization can do this.") -> CofferError:
    return forbidden(message)


def signup_closed(message: str = "Sign-up is closed on this Coffer.") -> CofferError:
    return CofferError(403, "signup_closed", message)


def conflict(code: str, message: str) -> CofferError:
    return CofferError(409, code, message)


def last_owner() -> CofferError:
    return conflict("last_owner", "Make someone else owner first: an organization needs an owner.")


def gone(code: str, message: str, status: str) -> CofferError:
    return CofferError(410, code, message, details={"status": status})
