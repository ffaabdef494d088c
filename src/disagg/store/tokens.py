"""The store's bearer tokens: who a request comes from. Only a token's hash is stored."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import select

from disagg.store.base import StoreBase
from disagg.store.models import TokenRow


@dataclass(frozen=True)
class Principal:
    """Who a request comes from."""

    tenant: str
    admin: bool


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenOps(StoreBase):
    """Creating tokens and resolving them to a tenant."""

    def create_token(self, tenant: str, admin: bool = False) -> str:
        """A new bearer token for `tenant`; only its hash is stored, so it is shown once."""
        token = "dg_" + secrets.token_urlsafe(24)
        with self.write() as s:
            s.add(TokenRow(token_hash=hash_token(token), tenant=tenant, admin=admin, created_at=time.time()))
        return token

    def principal(self, token: str) -> Principal | None:
        with self.read() as s:
            row = s.scalars(select(TokenRow).where(TokenRow.token_hash == hash_token(token))).first()
            return None if row is None else Principal(row.tenant, row.admin)

    def has_admin(self) -> bool:
        with self.read() as s:
            return s.scalars(select(TokenRow).where(TokenRow.admin.is_(True))).first() is not None


__all__ = ["Principal", "TokenOps", "hash_token"]
