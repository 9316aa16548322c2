"""Client values echoed back in error messages and details, cut short.

An error names the value it refused so that a person can find it, but the
value came from the network: echoing it whole lets a request of a few
megabytes make an answer (and a log line) as large, and `repr` of a huge
integer is itself costly (Python refuses it past 4,300 digits). Every echo of
a client value goes through `shown` (in messages) or `clip` (in details).
"""

from __future__ import annotations

import reprlib

# Characters of a client value an error message or detail repeats; past it
# the value is cut and ends with an ellipsis.
ECHO_CHARS_MAX = 64
# Integers wider than this many bits are described, not printed (repr of a
# 5,000-digit integer is slow, and refused past 4,300 digits).
_ECHO_INT_BITS_MAX = 200
_ELLIPSIS = "…"

_repr = reprlib.Repr()  # Python 3.11's Repr takes no arguments
_repr.maxlevel = 2
_repr.maxtuple = _repr.maxlist = _repr.maxarray = _repr.maxdict = 4
_repr.maxset = _repr.maxfrozenset = _repr.maxdeque = 4
_repr.maxstring = _repr.maxlong = _repr.maxother = ECHO_CHARS_MAX


def clip(text: str) -> str:
    """`text` itself when short, else its first ECHO_CHARS_MAX characters and '…'."""
    return text if len(text) <= ECHO_CHARS_MAX else text[:ECHO_CHARS_MAX] + _ELLIPSIS


def shown(value: object) -> str:
    """A short repr of a client value for an error message (in place of `{value!r}`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _ECHO_INT_BITS_MAX:
            return f"<an integer of {value.bit_length()} bits>"
        return clip(repr(value))
    if isinstance(value, str):
        if len(value) <= ECHO_CHARS_MAX:
            return repr(value)
        return f"{value[:ECHO_CHARS_MAX]!r}{_ELLIPSIS} ({len(value)} characters)"
    return clip(_repr.repr(value))


__all__ = ["ECHO_CHARS_MAX", "clip", "shown"]
