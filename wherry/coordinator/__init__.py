"""The log-backed coordinators on a replica node: one runtime (`runtime.py`: storage on the
replica manager, partition loading and unloading as leadership moves, timers on the node's
ticker) and the adapters that put the group, transaction and share coordinators on it. The
broker (`server/`) and the simulation (`sim/`) build them the same way."""
