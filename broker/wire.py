"""The wire protocol: newline-delimited JSON over the broker's Unix socket.

A request is ``{"id", "op", "args"}``; a response is ``{"id", "ok": true,
"result"}`` or ``{"id", "ok": false, "error": {"code", "message"}}``.  Every
op's arguments are an attrs class structured by one cattrs converter that
forbids extra keys, so a request can never smuggle in a field the op does not
define -- above all, never one that names an identity.  Identity belongs to
the connection (see ``broker.identity``).

This module is imported by the server and by the in-process core.  The
blocking client in ``broker.client`` speaks the same framing with plain
``json`` so that a CLI call from an agent stays cheap to start.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from typing import Any, Callable, Final, NamedTuple, TypeVar

import attrs
import cattrs
from cattrs import transform_error
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from store import jsoncodec
from broker.errors import ConclaveError, ErrorCode

__all__ = ["ConclaveError", "ErrorCode", "Request", "converter", "decode_line", "structure_args"]

#: The longest request or response line, newline included.  A line longer
#: than this is refused with ``line_too_long`` and the connection is closed,
#: because the rest of the stream can no longer be framed.
MAX_LINE_BYTES: Final = 1 << 20

#: Argument names that would let a caller say who it is, or who vouched.
#: They are refused with a dedicated error (and logged) instead of the
#: generic unknown-field error, so the mistake -- or the attack -- is plain.
IDENTITY_FIELDS: Final = frozenset(
    {
        "agent",
        "session",
        "principal",
        "author",
        "witness",
        "witnesses",
        "source_agent",
        "source_session",
        "corroborator",
        "sender",
        "from",
        "from_agent",
        "by",
        "as",
        "as_agent",
        "on_behalf_of",
        "operator",
        "identity",
        "parent",
        "uid",
        "pid",
    }
)


class Request(NamedTuple):
    """One decoded request line (a named tuple: one is made per request)."""

    id: int | str
    op: str
    args: dict[str, Any]


converter: Final = cattrs.Converter(forbid_extra_keys=True)


def _strict(kind: type, *accepted: type) -> None:
    # cattrs would coerce 3 into "3" and "5" into 5; a wire request must be exact.
    def hook(value: Any, _type: type) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got a boolean")
        if not isinstance(value, accepted):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return kind(value)

    converter.register_structure_hook(kind, hook)


_strict(str, str)
_strict(int, int)
_strict(float, int, float)
_strict(bool, bool)


def _strict_list(kind: Any) -> Callable[[Any, Any], list[Any]]:
    # cattrs would turn the string "a.txt" into ["a", ".", "t", "x", "t"]; a list must be a JSON array.
    (item,) = typing.get_args(kind) or (Any,)
    structure_item = converter.get_structure_hook(item)

    def hook(value: Any, _type: Any) -> list[Any]:
        if not isinstance(value, list):
            raise TypeError(f"expected a list (a JSON array), got {type(value).__name__}")
        return [structure_item(v, item) for v in value]

    return hook


converter.register_structure_hook_factory(lambda kind: typing.get_origin(kind) is list, _strict_list)

T = TypeVar("T")


def decode_line(line: bytes) -> Request:
    """Parse one request line.

    Raises:
        ConclaveError: ``bad_json`` or ``bad_request``, naming what was wrong.
    """
    try:
        raw = _DECODE(line.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConclaveError(ErrorCode.BAD_JSON, f"the request is not valid JSON: {exc}") from None
    if type(raw) is not dict:
        raise ConclaveError(ErrorCode.BAD_REQUEST, 'a request must be a JSON object {"id", "op", "args"}')
    if not raw.keys() <= _REQUEST_KEYS:
        raise ConclaveError(
            ErrorCode.BAD_REQUEST,
            f"a request has only the keys id, op and args; remove {', '.join(sorted(raw.keys() - _REQUEST_KEYS))}",
        )
    rid, op, args = raw.get("id"), raw.get("op"), raw.get("args", {})
    if type(rid) is not int and type(rid) is not str:  # JSON gives exact types; a bool is not an id
        raise ConclaveError(ErrorCode.BAD_REQUEST, "a request needs an id that is a number or a string")
    if type(op) is not str or not op:
        raise ConclaveError(ErrorCode.BAD_REQUEST, "a request needs an op that is a non-empty string")
    if type(args) is not dict:
        raise ConclaveError(ErrorCode.BAD_REQUEST, "args must be a JSON object")
    return Request(rid, op, args)


_REQUEST_KEYS: Final = frozenset({"id", "op", "args"})


def request_id_of(line: bytes) -> int | str | None:
    """Best-effort id of a line that failed to decode, so the error can echo it."""
    try:
        raw = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    rid = raw.get("id") if isinstance(raw, dict) else None
    return rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) else None


def identity_fields_in(args: dict[str, Any]) -> list[str]:
    if IDENTITY_FIELDS.isdisjoint(args):
        return []
    return sorted(k for k in args if k in IDENTITY_FIELDS)


def structure_args(op: str, args: dict[str, Any], cls: type[T]) -> T:
    """Turn a request's ``args`` into the op's attrs class.

    Raises:
        ConclaveError: ``identity_field`` when an argument names an identity,
            ``invalid_args`` naming the field that was wrong otherwise.
    """
    named = identity_fields_in(args)
    if named:
        raise ConclaveError(
            ErrorCode.IDENTITY_FIELD,
            f"{op}: refused field(s) {', '.join(named)}: identity comes from the connection, "
            "never from a request; remove them",
        )
    fast = _FAST.get(cls, _UNBUILT)
    if fast is _UNBUILT:
        fast = _FAST[cls] = _fast_structure(cls)
    if fast is not None:
        done = fast(args)
        if done is not None:
            return done
    try:
        return converter.structure(args, cls)
    except ForbiddenExtraKeysError as exc:
        raise ConclaveError(
            ErrorCode.INVALID_ARGS,
            f"{op}: unknown field(s) {', '.join(sorted(exc.extra_fields))}; "
            f"allowed: {', '.join(f.name for f in attrs.fields(cls)) or 'none'}",
        ) from None
    except ClassValidationError as exc:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {_describe(exc)}") from None
    except (ValueError, TypeError) as exc:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {exc}") from None


# -- the fast path -------------------------------------------------------------
#
# cattrs builds each op's arguments through generic machinery that collects
# detailed errors -- a few microseconds on every request, the hot lock ops
# included.  For arguments that are exactly what the converter would take
# unchanged (a str where a str is declared, a list of str, a literal, None for
# an optional), the class is built directly.  Anything else -- a missing or
# unknown field, a wrong type, a value a validator refuses -- returns None and
# goes to the converter, which stays the one definition of what is accepted
# and says what was wrong.  tests/broker/test_wire.py checks the two agree.

_UNBUILT: Final = object()
_FAST: dict[type, Callable[[dict[str, Any]], Any] | None] = {}
#: Exact JSON types each declared scalar accepts (a bool is never an int here).
_SCALARS: Final[dict[Any, tuple[type, ...]]] = {str: (str,), int: (int,), bool: (bool,), float: (int, float)}


def _exact(kind: Any) -> Callable[[Any], bool] | None:
    """A check passing exactly the values the converter keeps as they are, or None."""
    if kind in _SCALARS:
        accepted = _SCALARS[kind]
        return lambda v: type(v) in accepted
    origin, parts = typing.get_origin(kind), typing.get_args(kind)
    if origin is list and len(parts) == 1 and parts[0] in (str, int):
        only = frozenset(parts)
        return lambda v: type(v) is list and set(map(type, v)) <= only
    if origin is typing.Literal and all(type(p) is str for p in parts):
        allowed = frozenset(parts)
        return lambda v: type(v) is str and v in allowed
    if origin in (typing.Union, types.UnionType) and len(parts) == 2 and type(None) in parts:
        inner = _exact(parts[0] if parts[1] is type(None) else parts[1])
        return None if inner is None else (lambda v: v is None or inner(v))
    return None


def _fast_structure(cls: type[T]) -> Callable[[dict[str, Any]], T | None] | None:
    """The fast path for ``cls``, or None when one of its fields is not a plain type."""
    hints = typing.get_type_hints(cls)
    checks: dict[str, Callable[[Any], bool]] = {}
    floats: set[str] = set()
    required: set[str] = set()
    for f in attrs.fields(cls):
        check = _exact(hints[f.name])
        if check is None or not f.init or f.alias != f.name:
            return None
        checks[f.name] = check
        if hints[f.name] in (float, float | None):
            floats.add(f.name)  # the converter turns an int into a float
        if f.default is attrs.NOTHING:
            required.add(f.name)

    def structure(args: dict[str, Any]) -> T | None:
        for name, value in args.items():
            check = checks.get(name)
            if check is None or not check(value):
                return None
        if not required.issubset(args):
            return None
        if floats and not floats.isdisjoint(args):
            args = {k: float(v) if k in floats and v is not None else v for k, v in args.items()}
        try:
            return cls(**args)
        except Exception:  # a validator's refusal: the converter words it
            return None

    return structure


def _describe(exc: ClassValidationError) -> str:
    # transform_error gives "invalid value for type, expected int @ $.limit".
    return "; ".join(transform_error(exc, path="args")) or str(exc)


def encode(payload: dict[str, Any]) -> bytes:
    return _ENCODE(payload).encode() + b"\n"


def ok(rid: int | str | None, result: Any) -> bytes:
    # Plain JSON values go straight to json.dumps; attrs records are
    # unstructured by the converter when json meets them (see _default).
    return encode({"id": rid, "ok": True, "result": result})


def fail(rid: int | str | None, error: ConclaveError) -> bytes:
    return encode({"id": rid, "ok": False, "error": error.to_wire()})


def unstructure(value: Any) -> Any:
    return converter.unstructure(value)


def _default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(type(value)):
        return converter.unstructure(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# Built once: json.dumps/loads with options build a new coder on every call.
_DECODE: Final = json.JSONDecoder().decode
_ENCODE: Final = jsoncodec.compact(default=_default)
