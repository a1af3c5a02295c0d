"""JSON values and text read as the original JavaScript implementation read them. Pure.

Decisions must agree with it on every input it accepted, and Python's own readings differ at the edges:
``str.strip()`` and ``re``'s ``\\s`` take U+001C..U+001F and miss U+FEFF, and a whole float such as
``7.0`` is no ``int``. Every trim, whitespace match and integer read in the trigger domain and the forge
filters goes through here.
"""

from __future__ import annotations

import math
import re
from typing import Any

# JavaScript's WhiteSpace + LineTerminator: the set of String.prototype.trim and of the regex \s.
JS_WHITESPACE = (
    "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
# JavaScript's \s and \S as regex classes, for patterns that would otherwise use Python's.
JS_SPACE = f"[{re.escape(JS_WHITESPACE)}]"
JS_NON_SPACE = f"[^{re.escape(JS_WHITESPACE)}]"


def js_trim(text: str) -> str:
    """``text.trim()``."""
    return text.strip(JS_WHITESPACE)


def js_int(value: Any) -> int | None:
    """A JSON integer as JavaScript reads one (``Number.isInteger``), as an ``int``; else None.

    ``7.0`` is 7 (JSON has one number type, so a forge or a proxy may send it so); a bool, a string,
    NaN, an infinity or ``7.5`` is not a number id. Callers use the returned ``int``, never the raw
    value, so a key or URL built from it says ``7``, never ``7.0``."""
    if isinstance(value, bool):  # Python's True is an int; JSON's true is no number
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None
