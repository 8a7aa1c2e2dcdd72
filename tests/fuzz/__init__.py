"""Coverage-guided fuzzing of every decode path a client or a peer can reach (see
docs/fuzzing.md): the harness (`targets.py`), the in-process worker atheris drives
(`worker.py`), its supervisor and command line (`run.py`), the real-socket mode
(`socket_mode.py`), the seed corpus builder (`seed.py`) and the committed inputs
(`corpus/`, `regressions/`)."""
