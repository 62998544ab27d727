"""Benchmarks that reproduce the paper's claims and write reports (`python -m bench.PART.NAME`).

Every entry point calls `prepare()` first: importing the project changes nothing in
the process, so the TVM inspect patch and Flower's offline settings are explicit.
"""


def prepare() -> None:
    """TVM's inspect patch (before any TVM work) and Flower kept offline, in this process."""
    from schemas.protocol import prepare_flower_env
    from simoe_model import tvm_compat

    prepare_flower_env()
    tvm_compat.install()
