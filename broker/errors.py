"""Error codes and the one exception type that carries them.

Kept apart from ``broker.wire`` so the blocking client (and every CLI call an
agent makes) can raise and read them without importing cattrs.
"""

from __future__ import annotations

import enum


class ErrorCode(str, enum.Enum):
    """The closed set of error codes on the wire (documented in docs/PROTOCOL.md)."""

    BAD_JSON = "bad_json"
    BAD_REQUEST = "bad_request"
    LINE_TOO_LONG = "line_too_long"
    UNKNOWN_OP = "unknown_op"
    INVALID_ARGS = "invalid_args"
    IDENTITY_FIELD = "identity_field"
    NOT_AUTHENTICATED = "not_authenticated"
    AUTH_FAILED = "auth_failed"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    QUOTA = "quota"
    TOO_LARGE = "too_large"
    REJECTED = "rejected"
    LOCKED = "locked"
    DEADLOCK = "deadlock"
    TIMEOUT = "timeout"
    REVOKED = "revoked"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class ConclaveError(Exception):
    """An error with a wire code.  Raised inside, sent as a value at the edge."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code.value, "message": self.message}

    def __repr__(self) -> str:
        return f"ConclaveError({self.code.value!r}, {self.message!r})"
