"""One JSON encoder, built once, for the hot paths (every reply, every event).

``json.dumps`` with options, and even a prebuilt ``JSONEncoder``'s
``encode``, assemble the C encoder anew on every call -- the largest part of
encoding a small reply.  :func:`compact` builds it once.  Its output is the
same text as the ``JSONEncoder`` with the same options (tests check this);
where CPython's C accelerator is missing it falls back to that encoder.

Built without circular-reference markers: what is encoded here is always a
tree, and a cycle would end in ``RecursionError`` rather than wrong output.
"""

from __future__ import annotations

import json
import json.encoder
from typing import Any, Callable

Default = Callable[[Any], Any] | None


def compact(*, sort_keys: bool = False, ensure_ascii: bool = True, default: Default = None) -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), ...)`` with these options, as a prebuilt function."""
    fallback = json.JSONEncoder(separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=ensure_ascii, default=default).encode
    make = json.encoder.c_make_encoder
    if make is None:
        return fallback
    strings = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    chunks = make(None, default or fallback.__self__.default, strings, None, ":", ",", sort_keys, False, True)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode
