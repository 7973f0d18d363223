"""The command line: ``fastbench`` (``command``), its ``--config`` TOML files (``tomlconfig``) and
``fastbench validate`` (``validate``). The faces over the Python API; nothing below imports them."""

from fastbench.cli.command import main

__all__ = ("main",)
