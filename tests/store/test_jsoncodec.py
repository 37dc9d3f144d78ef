"""The prebuilt encoder writes exactly what json.dumps writes (event hashes depend on it)."""

from __future__ import annotations

import enum
import json
import math

import pytest

from store import jsoncodec


class Colour(str, enum.Enum):
    RED = "red"


VALUES = [
    {},
    [],
    {"b": 1, "a": [1, 2.5, None, True, False], "c": {"z": "é", "y": "\u2028\"\\\n\t"}},
    [1, -0.0, 1e-7, 1e300, 10**30, math.inf, -math.inf],
    {"unicode": "日本語 🎉", "ctrl": "\x00\x1f", 3: "int key", 2.5: "float key", None: "none key", True: "bool key"},
    ("a", ("nested", "tuple")),
    {"enum": Colour.RED, Colour.RED: "enum key"},
    [12345, "2026-11-29T22:03:38.189352+00:00", "lock.grant", "a00:s1", None, '{"x":1}', "0" * 64],
]


@pytest.mark.parametrize("sort_keys", [False, True])
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_the_prebuilt_encoder_writes_what_json_dumps_writes(sort_keys: bool, ensure_ascii: bool) -> None:
    encode = jsoncodec.compact(sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    for value in VALUES:
        if sort_keys and isinstance(value, dict) and len({type(k) for k in value}) > 1:
            continue  # json.dumps cannot sort mixed key types either
        expected = json.dumps(value, separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=ensure_ascii)
        assert encode(value) == expected, value
    # NaN has one spelling too.
    assert encode([math.nan]) == json.dumps([math.nan], separators=(",", ":")) == "[NaN]"


def test_the_default_hook_is_used_and_an_unknown_type_is_refused() -> None:
    encode = jsoncodec.compact(default=lambda v: sorted(v) if isinstance(v, set) else str(v))
    assert encode({"s": {3, 1, 2}}) == '{"s":[1,2,3]}'
    plain = jsoncodec.compact()
    with pytest.raises(TypeError):
        plain({"s": {1}})
    assert plain({"s": [1]}) == '{"s":[1]}'  # control
