"""rayworks: ICLR 2026 methods as Ray pipelines, each beside its baseline.

`platform`, `pipelines` and `evals` live under this import root, not at the repo top
level, because a top-level package named `platform` would shadow Python's standard
`platform` module (imported by Ray, PyTorch and pip) whenever the repo root is on
`sys.path`, e.g. in every Ray worker that receives the repo as its working_dir.
"""

__version__ = "0.1.0"
