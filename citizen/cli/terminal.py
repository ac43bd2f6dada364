"""Text a citizen wrote, made safe for the operator's terminal.

Wake logs, task files, heartbeats and their names are the citizen's: a string there may
carry escape sequences that, printed raw, retitle the window, rewrite what is on the
screen, or answer back into the operator's shell (issue 28). Every command that prints
such text puts it through `clean` first.
"""

from __future__ import annotations

import re

# Whole sequences first, so their parameters do not survive as garbage: CSI (ESC [ or
# the one-byte 0x9b), OSC / DCS / SOS / PM / APC strings up to their terminator (BEL,
# ESC \ or 0x9c) or the end, and any other ESC with the byte after it.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\s\S]?")
# Then every control left: C0 but newline and tab, DEL, and C1 (0x80-0x9f).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` without terminal control sequences or control characters (\\n, \\t kept)."""
    return _CONTROL.sub("", _SEQUENCE.sub("", text))
