"""`.properties` files read as Java's `Properties.load(InputStream)` reads them, as Kafka reads
its `server.properties` and the tools' `--command-config` files.

* The bytes are ISO 8859-1 (Latin-1): every byte is one character, so no file is undecodable;
  other characters are written `\\uXXXX`.
* Lines end at `\\n`, `\\r` or `\\r\\n`. A line whose first non-blank character is `#` or `!`
  is a comment; blank lines are skipped. Blanks are space, tab and form feed.
* A line ending in an odd number of backslashes goes on with the next line, whose leading
  blanks are dropped (a comment line never goes on; a continuation line starting with `#` is
  no comment).
* The key runs to the first unescaped `=`, `:` or blank; blanks, then one `=` or `:`, then
  blanks, separate it from the value, which runs to the end of the line (trailing blanks kept).
* In keys and values `\\t`, `\\n`, `\\r`, `\\f` and `\\uXXXX` are escapes; a backslash before
  any other character stands for that character. A malformed `\\uXXXX` is an error, as in Java.

Pure: `parse_properties` takes text, `decode_properties` bytes.
"""

from __future__ import annotations

__all__ = ["PropertiesError", "decode_properties", "parse_properties"]

_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")


class PropertiesError(ValueError):
    """A properties file Java would refuse (a malformed `\\uXXXX` escape)."""


def decode_properties(data: bytes) -> dict[str, str]:
    """Parse the bytes of a `.properties` file (Latin-1, as Java reads it)."""
    return parse_properties(data.decode("latin-1"))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line): comments and blank lines dropped, continuations
    joined, each natural line's leading blanks dropped."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, natural in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"),
                                     1):
        line = natural.lstrip(_BLANKS)
        if not pending:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending.append(line[:-1])
            continue
        pending.append(line)
        out.append((start, "".join(pending)))
        pending = []
    if pending:  # a continuation at the end of the file ends the line
        out.append((start, "".join(pending)))
    return out


def _unescape(text: str, line: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "\\" or i >= len(text):
            if c != "\\":
                out.append(c)
            continue
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if len(digits) < 4 or not set(digits) <= _HEX:
                raise PropertiesError(f"line {line}: malformed \\uxxxx encoding")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """The raw key and value of a logical line."""
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _BLANKS:
            break
        i += 1
    key = line[: min(i, n)]
    j = i
    while j < n and line[j] in _BLANKS:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _BLANKS:
            j += 1
    return key, line[j:]


def parse_properties(text: str) -> dict[str, str]:
    """Parse `.properties` text (already decoded); a later key overrides an earlier one."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        props[_unescape(key, number)] = _unescape(value, number)
    return props
