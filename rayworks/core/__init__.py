"""The bottom layer: typed configs, errors, the build cache and safetensors tree I/O.

It imports nothing else of rayworks, so models, the platform, pipelines and evals can all
build on it (the layer contract in pyproject.toml, `[tool.importlinter]`).
"""
