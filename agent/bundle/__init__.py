"""Thin GPU nodes: build on this host, measure on a GPU box that has only a runtime.

`export` picks candidates and compiles them here for the target's arch into a
bundle (cubins plus a manifest); `runtime` (copied into the bundle as `run.py`)
times them on the GPU node with the CUDA driver and torch, nothing else; `importer`
brings the results home as real `cuda` records with the GPU's profile.
"""
