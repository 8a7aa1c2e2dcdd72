"""Deterministic simulation of the controller and replication path.

The real replica managers, partitions, logs (real files in a temporary directory), purgatories,
follower fetchers and AlterPartition managers run in one process on a virtual-time event loop
(`loop.py`); a seeded simulated network (`network.py`) carries fetches, produces, controller
requests and AlterPartition between them. The controller is the real `controller.Controller`
(`real_controller.py`: candidates elected on an `EmbeddedCoordinator`, requests through the real
`NetworkChannelManager` over the simulated network; the default), or with `--controller model`
the small controller built from the controller's pure rules (`controller.py`);
`invariants.py` checks the safety properties after every step.
`python -m wherry.sim --seeds N` runs many seeds and prints a failing seed to replay.
"""
