"""Text an agent wrote is shown as text: markup stays literal, control characters are spelled out."""

from __future__ import annotations

import re

from broker.literal import code_block, code_span, visible


def test_control_and_format_characters_are_spelled_out_not_passed_on():
    hostile = "ok\x1b[2J\x1b]0;pwned\x07 txt\u202eexe.\u2066x\u200by\x00\x7f\x9b\u2028"
    shown = visible(hostile)
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u200b\u202e\u2066\u2028]", shown), shown
    for escape in ("\\x1b[2J", "\\x07", "\\u202e", "\\u2066", "\\u200b", "\\x00", "\\x7f", "\\x9b", "\\u2028"):
        assert escape in shown
    # Control: ordinary text, accents and markup-looking brackets are left exactly as they are.
    plain = "naïve café [bold]x[/] name://[/] 日本"
    assert visible(plain) == plain


def test_a_one_line_field_cannot_start_a_line_of_its_own():
    forged = "done\n  corroborated by bob:123 (domain bob) blind, counted"
    assert "\n" not in visible(forged) and "\\n" in visible(forged)
    # Control: a message body keeps its lines and tabs, and still loses escapes.
    assert visible("a\n\tb\x1b[1m", keep_newlines=True) == "a\n\tb\\x1b[1m"


def test_markdown_spans_and_blocks_cannot_be_closed_from_inside():
    text = "``` not a fence ``` and `tick`"
    span = code_span(text)
    ticks = re.match(r"`+", span).group()
    assert len(ticks) == 4 and span.endswith(ticks) and ticks not in span[len(ticks) : -len(ticks)]
    block = code_block("line\n````\n# heading")
    fence = block.splitlines()[-1]
    assert fence == "`````" and block.splitlines()[0] == fence + "text"
    assert block.splitlines()[1:-1] == ["line", "````", "# heading"]
