"""`StateEnum`: states named as Kafka names them."""

from __future__ import annotations

import enum

__all__ = ["StateEnum"]


class StateEnum(enum.Enum):
    """An enum of states whose value is Kafka's name of the state, which `str` gives."""

    def __str__(self) -> str:
        return str(self.value)
