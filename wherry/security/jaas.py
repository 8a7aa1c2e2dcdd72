"""Kafka's JAAS configuration strings (`sasl.jaas.config`) and where a broker finds them.

A JAAS config is `<LoginModule class> <flag> [name=value ...];`, values bare words or double
quoted with backslash escapes, e.g.::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

Kafka's `sasl.jaas.config` property holds exactly one login module. A broker looks for a
mechanism's JAAS config under `listener.name.<listener>.<mechanism>.sasl.jaas.config` (both
lowercased) first, then the unprefixed `sasl.jaas.config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_WORD_EXTRA = set("-_$.")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


@dataclass(frozen=True, slots=True)
class JaasEntry:
    """One login module of a JAAS config: its class, control flag (lowercase) and options."""

    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


class _Tokens:
    """A small tokenizer in the spirit of Java's StreamTokenizer as Kafka's JaasConfig sets it
    up: words, double-quoted strings, `=` and `;`; `//` and `/* */` comments skipped."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip(self) -> None:
        t = self.text
        while self.pos < len(t):
            if t[self.pos].isspace():
                self.pos += 1
            elif t.startswith("//", self.pos):
                end = t.find("\n", self.pos)
                self.pos = len(t) if end < 0 else end + 1
            elif t.startswith("/*", self.pos):
                end = t.find("*/", self.pos + 2)
                if end < 0:
                    raise ValueError("Invalid JAAS config: unterminated comment")
                self.pos = end + 2
            else:
                return

    def next(self) -> tuple[str, str] | None:
        """("word"|"string"|"sym", text), or None at the end."""
        self._skip()
        t = self.text
        if self.pos >= len(t):
            return None
        c = t[self.pos]
        if c in "=;":
            self.pos += 1
            return "sym", c
        if c == '"':
            return "string", self._quoted()
        if c.isalnum() or c in _WORD_EXTRA:
            start = self.pos
            while self.pos < len(t) and (t[self.pos].isalnum() or t[self.pos] in _WORD_EXTRA):
                self.pos += 1
            return "word", t[start : self.pos]
        raise ValueError(f"Invalid JAAS config: unexpected character {c!r} at {self.pos}")

    def _quoted(self) -> str:
        t = self.text
        self.pos += 1  # opening quote
        out: list[str] = []
        while self.pos < len(t):
            c = t[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            if c == "\\":
                if self.pos + 1 >= len(t):
                    break
                nxt = t[self.pos + 1]
                out.append(_ESCAPES.get(nxt, nxt))
                self.pos += 2
                continue
            out.append(c)
            self.pos += 1
        raise ValueError("Invalid JAAS config: unterminated quoted value")


def parse_jaas_entries(text: str) -> list[JaasEntry]:
    """Every login module of a JAAS config text; ValueError (`Invalid JAAS config: ...`) on
    malformed text: a missing flag or `;`, an unknown flag, an option without `=` or value."""
    tokens = _Tokens(text)
    entries: list[JaasEntry] = []
    while (tok := tokens.next()) is not None:
        kind, module = tok
        if kind != "word":
            raise ValueError(f"Invalid JAAS config: expected a login module class, got {module!r}")
        flag_tok = tokens.next()
        if flag_tok is None or flag_tok[0] != "word":
            raise ValueError(f"Invalid JAAS config: login module control flag not specified "
                             f"for {module}")
        flag = flag_tok[1].lower()
        if flag not in FLAGS:
            raise ValueError(f"Invalid JAAS config: invalid login module control flag "
                             f"{flag_tok[1]!r}")
        options: dict[str, str] = {}
        while True:
            tok = tokens.next()
            if tok is None:
                raise ValueError("Invalid JAAS config: login module entry not terminated by ';'")
            if tok == ("sym", ";"):
                break
            kind, key = tok
            if kind != "word":
                raise ValueError(f"Invalid JAAS config: expected an option name, got {key!r}")
            if tokens.next() != ("sym", "="):
                raise ValueError(f"Invalid JAAS config: option {key} has no '=' and value")
            value = tokens.next()
            if value is None or value[0] == "sym":
                raise ValueError(f"Invalid JAAS config: option {key} has no value")
            options[key] = value[1]
        entries.append(JaasEntry(module, flag, options))
    return entries


def parse_jaas_config(text: str) -> JaasEntry:
    """The single login module of a `sasl.jaas.config` value (Kafka accepts exactly one)."""
    entries = parse_jaas_entries(text)
    if len(entries) != 1:
        raise ValueError(f"JAAS config property contains {len(entries)} login modules, "
                         "should be 1 module")
    return entries[0]


def jaas_property_names(listener: str, mechanism: str) -> tuple[str, str]:
    """The two property names a broker consults, most specific first."""
    return (
        f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
        "sasl.jaas.config",
    )


def listener_jaas(props: Mapping[str, str], listener: str, mechanism: str) -> JaasEntry | None:
    """The JAAS config of `mechanism` on `listener`: the listener-and-mechanism prefixed
    property first, then `sasl.jaas.config`; None when neither is set."""
    for name in jaas_property_names(listener, mechanism):
        text = props.get(name)
        if text is not None and text.strip():
            return parse_jaas_config(text)
    return None


def plain_users(entry: JaasEntry | None) -> dict[str, str]:
    """PLAIN users from `user_<name>="<password>"` options (Kafka PlainServerCallbackHandler)."""
    if entry is None:
        return {}
    return {k[len("user_"):]: v for k, v in entry.options.items()
            if k.startswith("user_") and len(k) > len("user_")}


def client_credentials(entry: JaasEntry) -> tuple[str, str]:
    """(username, password) a client (e.g. this broker to another) logs in with."""
    try:
        return entry.options["username"], entry.options["password"]
    except KeyError as e:
        raise ValueError(f"JAAS config of {entry.login_module} lacks option {e.args[0]}") from e
