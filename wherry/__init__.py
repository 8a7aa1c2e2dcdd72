"""wherry: a Kafka-compatible, replicated commit-log broker in Python."""

__version__ = "0.1.0"
