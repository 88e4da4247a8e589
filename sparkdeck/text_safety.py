"""Text from outside (a model's reply, a server's error page, a container's log) made safe
to put on a terminal, into a file or into a widget.

A model or a hostile server can send ESC sequences that clear the screen, retitle the
terminal or rewrite what was printed before, BEL that rings, NUL that some terminals drop
and editors choke on, and C1 controls (U+0080-U+009F) that some terminals treat as ESC +
a letter. Every path that prints or saves server-supplied text goes through `clean`:
newline and tab are kept, CR before a newline is dropped (CRLF line ends are harmless),
and every other control character becomes a visible stand-in, so nothing is executed and
nothing is silently lost. `excerpt` does the same for a short, one-line piece of a body
that goes into an error message.
"""

from __future__ import annotations

import re

# C0 except \t and \n, DEL, and C1. \r is handled after CRLF has become LF.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPACES = re.compile(r"\s+")


def _stand_in(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # Unicode "control pictures": ␛ for ESC, ␇ for BEL, ␀ ...
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"\\x{code:02x}"  # C1 has no pictures: spelt out


def clean(text: str) -> str:
    """`text` with every control character but newline and tab shown, not obeyed."""
    if text.isprintable():  # the common case: nothing to do (tabs and newlines fail this)
        return text
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return _CONTROL.sub(_stand_in, text)


def excerpt(text: str, limit: int = 200) -> str:
    """A short single-line piece of `text` for an error message: cleaned, runs of
    whitespace (newlines too) folded to one space, cut at `limit` characters with '…'."""
    flat = _SPACES.sub(" ", clean(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
