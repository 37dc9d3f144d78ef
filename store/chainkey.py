"""The secret that keys the event chain, kept in a file outside the database.

An unkeyed hash chain only proves that the log is *consistent*: anyone who
can write the database file can append a correctly chained forgery, or
delete an event and rehash everything after it.  Keyed with HMAC-SHA256,
each link can only be made by someone holding the key, and the key lives in
a 0600 file in the state directory (``StatePaths.chain_key``), never in the
database.  A copy of ``conclave.db`` alone cannot be rewritten so that it
still verifies.

Trap: the key is exactly as safe as that file.  A process running as the
user outside every sandbox can read it; against such a process the anchor
(``store.anchor``) and a head a person kept elsewhere
(``conclave memory verify --expect-head``) are what remain.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import Final, final

#: Bytes of key material (HMAC-SHA256 wants at least 32).
KEY_BYTES: Final = 32
_BLOCK: Final = 64  # SHA-256's block size: the HMAC pads are this long


class ChainKeyError(RuntimeError):
    """The key file exists but cannot be used (unreadable, malformed)."""


@final
class ChainKey:
    """An HMAC-SHA256 key for the event chain, with the pads precomputed.

    :meth:`mac` is on the hottest write path (every lock decision's event is
    hashed), so the inner and outer pads are hashed once here and each MAC
    copies two hash states instead of re-deriving them -- the same bytes as
    ``hmac.new(secret, message, "sha256")`` (a test holds that), in about the
    time of one plain SHA-256.
    """

    __slots__ = ("_inner", "_outer", "id")

    def __init__(self, secret: bytes) -> None:
        if len(secret) < KEY_BYTES:
            raise ChainKeyError(f"a chain key needs at least {KEY_BYTES} bytes, got {len(secret)}")
        padded = secret.ljust(_BLOCK, b"\0") if len(secret) <= _BLOCK else hashlib.sha256(secret).digest().ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in padded))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in padded))
        #: Names the key without revealing it (recorded in the log's switch-over event and the anchor).
        self.id = hashlib.sha256(b"conclave chain key id\0" + secret).hexdigest()[:16]

    def mac(self, message: bytes) -> str:
        """HMAC-SHA256 of ``message`` under this key, as 64 hex digits."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def __repr__(self) -> str:  # never the secret
        return f"ChainKey(id={self.id})"

    @classmethod
    def generate(cls) -> ChainKey:
        return cls(secrets.token_bytes(KEY_BYTES))

    @classmethod
    def load(cls, path: Path) -> ChainKey | None:
        """The key in ``path``; None when there is no such file.

        Raises:
            ChainKeyError: the file is there but is not a key this code wrote.
        """
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ChainKeyError(f"cannot read the chain key {path}: {exc.strerror}") from None
        try:
            secret = bytes.fromhex(text)
        except ValueError:
            raise ChainKeyError(f"the chain key {path} is not hex text; it was edited or replaced") from None
        return cls(secret)

    @classmethod
    def create(cls, path: Path) -> ChainKey:
        """A new key, written to ``path`` (mode 0600, never over an existing file)."""
        secret = secrets.token_bytes(KEY_BYTES)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secret.hex().encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        return cls(secret)


def loose_mode(path: Path) -> int | None:
    """The key file's permission bits when others than the user may read or write it; None when they may not."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    return mode if mode & 0o077 else None
