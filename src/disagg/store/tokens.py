"""The store's bearer tokens: who a request comes from. Only a token's hash is stored.

A token belongs to a tenant (or is an admin's), may expire (`expires_at`), and is revoked by deleting
its row: every look-up reads the store, so a revoked or expired token stops working at once in every
process that reads it (the API's short cache aside, `disagg.api.deps`).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import CursorResult, delete, or_, select

from disagg.store.base import StoreBase
from disagg.store.models import TokenRow


@dataclass(frozen=True)
class Principal:
    """Who a request comes from. `expires_at`: when the token stops working (None: never)."""

    tenant: str
    admin: bool
    expires_at: float | None = None


@dataclass(frozen=True)
class TokenInfo:
    """A token as it is listed: never its secret."""

    id: int
    tenant: str
    admin: bool
    created_at: float
    expires_at: float | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "admin": self.admin, "created_at": self.created_at,
                "expires_at": self.expires_at}


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _info(row: TokenRow) -> TokenInfo:
    return TokenInfo(row.id, row.tenant, row.admin, row.created_at, row.expires_at)


class TokenOps(StoreBase):
    """Creating, listing, revoking tokens and resolving them to a tenant."""

    def create_token(self, tenant: str, admin: bool = False) -> str:
        """A new bearer token for `tenant` that never expires; only its hash is stored, so it is shown once."""
        return self.issue_token(tenant, admin)[1]

    def issue_token(self, tenant: str, admin: bool = False, expires_in_s: float | None = None
                    ) -> tuple[TokenInfo, str]:
        """A new token for `tenant`, valid for `expires_in_s` seconds (None: until revoked): (its record,
        its secret). The secret is not kept; only its hash is."""
        token = "dg_" + secrets.token_urlsafe(24)
        now = time.time()
        row = TokenRow(token_hash=hash_token(token), tenant=tenant, admin=admin, created_at=now,
                       expires_at=None if expires_in_s is None else now + expires_in_s)
        with self.write(urgent=True) as s:
            s.add(row)
            s.flush()
            info = _info(row)
        return info, token

    def principal(self, token: str, now: float | None = None) -> Principal | None:
        """Who `token` belongs to, or None: unknown, revoked or expired."""
        now = time.time() if now is None else now
        with self.read() as s:
            row = s.scalars(select(TokenRow).where(TokenRow.token_hash == hash_token(token))).first()
            if row is None or (row.expires_at is not None and row.expires_at <= now):
                return None
            return Principal(row.tenant, row.admin, row.expires_at)

    def tokens(self, after: int | None = None, limit: int = 500) -> list[TokenInfo]:
        """The tokens that still work (not expired), oldest first, from id `after` on, at most `limit`."""
        now = time.time()
        query = select(TokenRow).where(or_(TokenRow.expires_at.is_(None), TokenRow.expires_at > now))
        if after is not None:
            query = query.where(TokenRow.id > after)
        with self.read() as s:
            return [_info(r) for r in s.scalars(query.order_by(TokenRow.id).limit(limit))]

    def revoke_token(self, token_id: int) -> bool:
        """Revoke a token (its row goes). False when there is no such token."""
        with self.write(urgent=True) as s:
            result: CursorResult[Any] = s.execute(delete(TokenRow).where(TokenRow.id == token_id))  # type: ignore[assignment]
            return bool(result.rowcount)

    def purge_expired_tokens(self, before: float) -> int:
        """Delete the rows of tokens that expired before `before` (they no longer work anyway)."""
        with self.write() as s:
            query = delete(TokenRow).where(TokenRow.expires_at.is_not(None), TokenRow.expires_at < before)
            result: CursorResult[Any] = s.execute(query)  # type: ignore[assignment]
            return int(result.rowcount or 0)

    def has_admin(self) -> bool:
        with self.read() as s:
            return s.scalars(select(TokenRow).where(TokenRow.admin.is_(True))).first() is not None


__all__ = ["Principal", "TokenInfo", "TokenOps", "hash_token"]
