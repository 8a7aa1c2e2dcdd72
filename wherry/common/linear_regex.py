"""Regular expressions from clients, matched in linear time.

Kafka matches the patterns clients send (a consumer group's `SubscribedTopicRegex`,
ListTransactions' `TransactionalIdPattern`) with RE2/J, whose matching time grows linearly with
the input. Python's `re` backtracks: a pattern such as `(a+)+b` against a topic named `aaaa...`
takes exponential time, and one request would stall the broker's event loop. These patterns
are compiled with RE2 (the `google-re2` package), the engine RE2/J reimplements: the same
syntax, the same guarantees.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["InvalidPattern", "LinearPattern", "compile_linear"]


class InvalidPattern(ValueError):
    """A pattern RE2 does not accept (bad syntax, or a backtracking-only construct such as a
    lookahead or a backreference)."""


class LinearPattern(Protocol):
    def fullmatch(self, text: str) -> Any: ...


_OPTIONS: Any = None


def compile_linear(pattern: str) -> LinearPattern:
    """`pattern` compiled by RE2; raises InvalidPattern. Errors are not logged by RE2 itself."""
    global _OPTIONS
    import re2  # imported on first use: the broker's start does not need it

    if _OPTIONS is None:
        options = re2.Options()
        options.log_errors = False
        _OPTIONS = options
    try:
        compiled: LinearPattern = re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        detail = e.args[0] if e.args else e
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidPattern(f"invalid regular expression {pattern!r}: {detail}") from None
    return compiled
