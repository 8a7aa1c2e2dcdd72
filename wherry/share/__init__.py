"""Share groups (KIP-932), pure: the share-partition state machine (`partition.py`), share
sessions (`sessions.py`), share-group membership and its assignor (`group.py`), group configs
(`config.py`) and the share coordinator's persisted state (`state.py`). No I/O; time is
passed in as `now_ms`."""
