"""Quota entities and Kafka's precedence among them.

An entity is a user, a client id, or both; either may be the default (`<default>` in the
store). For a request of user U and client id C, a quota applies from the first of these that
has one (Kafka's DefaultQuotaCallback):

    1. user U, client C           5. default user, default client
    2. user U, default client     6. default user
    3. user U                     7. client C
    4. default user, client C     8. default client

The quota is shared by every request with the same *metric tags*, (user, client id) with "" for
a part the entity does not name: a quota on user U alone (3) bounds all of U's clients
together; a default client quota (8) bounds each client id on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT", "Name", "QuotaEntity", "metric_tags", "quota_for_tags"]


class _Default:
    """The default entity name (`<default>` in the store)."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default()
Name = str | _Default


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A user and/or a client id; None for the part the entity does not name."""

    user: Name | None = None
    client_id: Name | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id or both")


MetricTags = tuple[str, str]  # (user, client id), "" for a part not named


def metric_tags(quotas: Mapping[QuotaEntity, float], user: str, client_id: str) -> MetricTags:
    """The tags whose quota bounds a request of `user` and `client_id`, by the precedence
    above; ("", client id) when no user entity has a quota."""
    has = quotas.__contains__
    if has(QuotaEntity(user, client_id)) or has(QuotaEntity(user, DEFAULT)):
        return (user, client_id)
    if has(QuotaEntity(user, None)):
        return (user, "")
    if has(QuotaEntity(DEFAULT, client_id)) or has(QuotaEntity(DEFAULT, DEFAULT)):
        return (user, client_id)
    if has(QuotaEntity(DEFAULT, None)):
        return (user, "")
    return ("", client_id)


def quota_for_tags(quotas: Mapping[QuotaEntity, float], tags: MetricTags) -> float | None:
    """The bound of the quota that applies to `tags` (None: unlimited)."""
    user, client_id = tags
    order: list[QuotaEntity]
    if user and client_id:
        order = [QuotaEntity(user, client_id), QuotaEntity(user, DEFAULT),
                 QuotaEntity(DEFAULT, client_id), QuotaEntity(DEFAULT, DEFAULT)]
    elif user:
        order = [QuotaEntity(user, None), QuotaEntity(DEFAULT, None)]
    else:
        order = [QuotaEntity(None, client_id), QuotaEntity(None, DEFAULT)]
    for entity in order:
        bound = quotas.get(entity)
        if bound is not None:
            return bound
    return None
