"""Kafka principals (`User:alice`) and who a request comes from (`Session`)."""

from __future__ import annotations

from wherry.common.record import frozen_record

USER_TYPE = "User"


@frozen_record(slots=True)
class KafkaPrincipal:
    """Kafka's KafkaPrincipal: a type (always "User" for authenticated principals) and a
    name. Printed as Kafka prints it, `User:alice`."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`User:alice` → KafkaPrincipal("User", "alice"); ValueError without a type."""
        ptype, sep, name = text.partition(":")
        if not sep or not ptype or not name:
            raise ValueError(f"expected a principal of the form Type:name, got {text!r}")
        return cls(ptype, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER_TYPE, name)


@frozen_record(slots=True)
class Session:
    """Who sent a request: the authenticated principal, the client's IP address (no port),
    the listener it came in on and that listener's security protocol."""

    principal: KafkaPrincipal
    client_address: str
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"


def anonymous_session(client_address: str = "127.0.0.1") -> Session:
    return Session(ANONYMOUS, client_address)
