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
import math
import re
import types
import typing
import unicodedata
from typing import Any, Callable, Final, NamedTuple, TypeVar

import attrs
import cattrs
from cattrs import transform_error
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError, IterableValidationNote
from cattrs.v import format_exception

from store import jsoncodec
from broker.errors import ConclaveError, ErrorCode

__all__ = [
    "ConclaveError",
    "ErrorCode",
    "Request",
    "UnfitValue",
    "check_text",
    "converter",
    "decode_line",
    "escape",
    "structure_args",
    "text_problem",
]

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


# -- what a value may be ---------------------------------------------------------
#
# One definition of acceptable text and numbers, applied by the converter to
# every string and number of every op's arguments -- resources, slot names,
# claim text, evidence, reasons, queries, mail, status lines -- before any
# handler runs.  Text is valid Unicode (JSON can carry a lone surrogate,
# "\ud800", which no UTF-8 store can hold) with no control character but
# newline and tab (a NUL truncates C strings; an ESC rewrites a terminal).
# Integers fit SQLite's 64 bits; floats are finite.

#: The characters no text field may hold: C0 controls but tab and newline,
#: DEL, C1 controls, and surrogates (a surrogate in a Python str is always lone
#: or a pair JSON did not join, and neither can be encoded as UTF-8).
_UNFIT: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
#: Line breaks, refused where text must be one line (a subject, a status).
_BREAKS: Final = re.compile("[\n\t\u2028\u2029]")
#: SQLite's INTEGER range.
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1


class UnfitValue(ValueError):
    """A value of the right type that the wire still refuses; the message says why, safely."""


def escape(char: str) -> str:
    """A character as a reader can see it: ``\\x1b (U+001B)``, never the raw control character."""
    code = ord(char)
    literal = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    name = unicodedata.name(char, "")
    return f"{literal} (U+{code:04X}{' ' + name if name else ''})"


def text_problem(value: str, *, one_line: bool = False) -> str | None:
    """What makes ``value`` unfit as text (a sentence without the text itself), or None.

    ``one_line`` also refuses newlines, tabs and Unicode's line and paragraph
    separators.
    """
    if value.isprintable():  # nearly every string: one pass in C, no regex
        return None
    bad = _UNFIT.search(value)
    if bad is not None:
        char = bad.group()
        if "\ud800" <= char <= "\udfff":
            return f"is not valid Unicode text: a lone surrogate {escape(char)} at offset {bad.start()}"
        return f"contains the control character {escape(char)} at offset {bad.start()}; text may hold newlines and tabs, no other control character"
    if one_line:
        brk = _BREAKS.search(value)
        if brk is not None:
            return f"contains {escape(brk.group())} at offset {brk.start()}; it must be one line"
    return None


def check_text(what: str, value: str | None, *, one_line: bool = False) -> None:
    """Refuse unfit text by name (for text that does not come through :func:`structure_args`).

    Raises:
        ConclaveError: ``invalid_args``, naming ``what`` and the character.
    """
    if value is not None:
        problem = text_problem(value, one_line=one_line)
        if problem is not None:
            raise ConclaveError(ErrorCode.INVALID_ARGS, f"{what} {problem}")


def _fit_text(value: Any) -> bool:
    return type(value) is str and (value.isprintable() or text_problem(value) is None)


def _fit_int(value: Any) -> bool:
    return type(value) is int and INT_MIN <= value <= INT_MAX


def _fit_float(value: Any) -> bool:
    # An int in SQLite's range always converts to a finite float.
    return (type(value) is float and math.isfinite(value)) or _fit_int(value)


converter: Final = cattrs.Converter(forbid_extra_keys=True)


def _strict(kind: type, *accepted: type) -> None:
    # cattrs would coerce 3 into "3" and "5" into 5; a wire request must be exact.
    def hook(value: Any, _type: type) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got a boolean")
        if not isinstance(value, accepted):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return _fit(kind, value)

    converter.register_structure_hook(kind, hook)


def _fit(kind: type, value: Any) -> Any:
    """``value`` as ``kind``, or :class:`UnfitValue` saying what is wrong with it."""
    if kind is str:
        problem = text_problem(value)
        if problem is not None:
            raise UnfitValue(problem)
    elif kind is int:
        if not INT_MIN <= value <= INT_MAX:
            raise UnfitValue(f"is an integer outside -2^63 .. 2^63-1 (a {value.bit_length()}-bit integer)")
    elif kind is float:
        try:
            number = float(value)
        except OverflowError:
            raise UnfitValue(f"is a number too large for a float (a {value.bit_length()}-bit integer)") from None
        if not math.isfinite(number):
            raise UnfitValue("is not a finite number")
        return number
    return kind(value)


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
        out, wrong = [], []
        for index, v in enumerate(value):
            try:
                out.append(structure_item(v, item))
            except Exception as exc:  # noted with its index, so the message says which item
                exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(f"item {index}", index, item)]
                wrong.append(exc)
        if wrong:
            raise IterableValidationError(f"{len(wrong)} item(s) of the list are wrong", wrong, kind)
        return out

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
    except RecursionError:
        raise ConclaveError(ErrorCode.BAD_JSON, "the request is nested too deeply to decode; a request is an object of plain values") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an over-long integer, NaN or Infinity
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
    if not (_fit_text(rid) if type(rid) is str else _fit_int(rid)):
        # The id is echoed back: it must be text any client can decode, or a 64-bit integer.
        raise ConclaveError(ErrorCode.BAD_REQUEST, "a request id must be printable text or an integer within 64 bits")
    if type(op) is not str or not op:
        raise ConclaveError(ErrorCode.BAD_REQUEST, "a request needs an op that is a non-empty string")
    if type(args) is not dict:
        raise ConclaveError(ErrorCode.BAD_REQUEST, "args must be a JSON object")
    return Request(rid, op, args)


_REQUEST_KEYS: Final = frozenset({"id", "op", "args"})


def request_id_of(line: bytes) -> int | str | None:
    """Best-effort id of a line that failed to decode, so the error can echo it."""
    try:
        raw = _DECODE(line.decode())
    except (ValueError, RecursionError):
        return None
    rid = raw.get("id") if isinstance(raw, dict) else None
    return rid if _fit_text(rid) or _fit_int(rid) else None


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
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {_unknown_fields(exc, cls)}") from None
    except ClassValidationError as exc:
        raise ConclaveError(ErrorCode.INVALID_ARGS, f"{op}: {_describe(exc, cls)}") from None
    except (ValueError, TypeError, ArithmeticError) as exc:
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
#: For each declared scalar, the values the converter keeps as they are: exact
#: JSON types (a bool is never an int here) that :func:`_fit` accepts.
_SCALARS: Final[dict[Any, Callable[[Any], bool]]] = {
    str: _fit_text,
    int: _fit_int,
    bool: lambda v: type(v) is bool,
    float: _fit_float,
}


def _exact(kind: Any) -> Callable[[Any], bool] | None:
    """A check passing exactly the values the converter keeps as they are, or None."""
    if kind in _SCALARS:
        return _SCALARS[kind]
    origin, parts = typing.get_origin(kind), typing.get_args(kind)
    if origin is list and len(parts) == 1 and parts[0] in (str, int):
        item = _SCALARS[parts[0]]
        return lambda v: type(v) is list and all(map(item, v))
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


def _describe(exc: ClassValidationError, cls: type) -> str:
    """Each wrong field as ``args.limit: what was wrong``."""

    def explain(error: BaseException, kind: type | None) -> str:
        if isinstance(error, UnfitValue):
            return str(error)
        if isinstance(error, ForbiddenExtraKeysError):
            return _unknown_fields(error, cls)
        if isinstance(error, ArithmeticError):
            return f"is not a usable number ({error})"
        return format_exception(error, kind)

    # transform_error gives "<explanation> @ args.limit"; the field reads better first.
    lines = [line.rpartition(" @ ") for line in transform_error(exc, path="args", format_exception=explain)]
    return "; ".join(f"{path}: {what}" if path != "args" else what for what, _, path in lines) or str(exc)


def _unknown_fields(exc: ForbiddenExtraKeysError, cls: type) -> str:
    # A field name is the client's text: shown escaped, like any other.
    names = ", ".join(repr(n)[1:-1] for n in sorted(exc.extra_fields))
    return f"unknown field(s) {names}; allowed: {', '.join(f.name for f in attrs.fields(cls)) or 'none'}"


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


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a number must be finite)")


# Built once: json.dumps/loads with options build a new coder on every call.
# NaN and Infinity are Python's extensions to JSON, refused as bad JSON.
_DECODE: Final = json.JSONDecoder(parse_constant=_no_constants).decode
_ENCODE: Final = jsoncodec.compact(default=_default)
