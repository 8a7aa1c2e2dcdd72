"""Observability: the HTTP listener (`http.listeners`) with Prometheus metrics, health and
readiness, and the live web console. Reads the broker's parts through `BrokerSources`; imports
nothing of the server (tests/test_architecture.py)."""
