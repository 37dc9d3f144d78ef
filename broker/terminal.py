"""Text that is safe to show on a person's terminal.

Agents write text the operator later reads -- their output, status lines,
claims, mail.  A terminal obeys escape sequences wherever they come from,
so text an agent wrote must lose them before it is shown: otherwise an agent
can retitle the operator's window, clear or redraw the screen, move the
cursor, or hide words.  (Rich removes a few control characters, not escape
sequences.)
"""

from __future__ import annotations

import re
from typing import Final

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-byte escapes, then any C0/C1 control but tab and newline.
_CONTROL: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal control sequences or control characters (tabs and newlines kept)."""
    return _CONTROL.sub("", text)
