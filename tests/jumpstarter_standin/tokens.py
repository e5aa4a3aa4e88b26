"""Signed bearer tokens, as the controller's internal issuer hands them out.

A token is a JWT (HS256) whose subject names the object it was issued to,
including its UID: ``exporter:<namespace>:<name>:<uid>`` or
``client:<namespace>:<name>:<uid>``. A token keeps its subject for life, so
a Secret that outlives its Exporter carries a token for the old UID.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time

ISSUER = "https://jumpstarter.standin.test/internal"
AUDIENCE = "jumpstarter"
LIFETIME = 365 * 24 * 3600


class TokenError(Exception):
    """The token is malformed, not ours, or expired."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def subject_of(kind: str, namespace: str, name: str, uid: str) -> str:
    return ":".join((kind, namespace, name, uid))


class Signer:
    def __init__(self, key: bytes | None = None):
        self._key = key or secrets.token_bytes(32)

    def issue(self, subject: str) -> str:
        now = int(time.time())
        header = {"alg": "HS256", "typ": "JWT"}
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now, "nbf": now,
                  "exp": now + LIFETIME}
        signing_input = ".".join(_b64(json.dumps(part, separators=(",", ":")).encode())
                                 for part in (header, claims))
        signature = hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(signature)}"

    def verify(self, token: str) -> dict:
        """The claims of a token this signer issued; TokenError otherwise."""
        try:
            header_part, claims_part, signature_part = token.split(".")
            expected = hmac.new(self._key, f"{header_part}.{claims_part}".encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(expected, _unb64(signature_part)):
                raise TokenError("signature mismatch")
            claims = json.loads(_unb64(claims_part))
        except (ValueError, TypeError) as exc:
            raise TokenError(f"malformed token: {exc}") from exc
        if claims.get("iss") != ISSUER or claims.get("aud") != AUDIENCE:
            raise TokenError("token from another issuer")
        if claims.get("exp", 0) < time.time():
            raise TokenError("token expired")
        return claims
