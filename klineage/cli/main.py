"""The ``klineage`` command: one typer app; each command group lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="klineage",
    help="KLineage: verified GPU-kernel optimization skills, learned by walking expert Triton kernels "
    "backward. Start with `klineage demo`.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    # Each module adds its commands to ``app``; imports stay inside so `--help` stays fast.
    from klineage.cli import kb_commands

    kb_commands.register(app)
    try:
        from klineage.cli import validate_commands
    except ImportError:  # pragma: no cover - the validator lands separately
        return
    validate_commands.register(app)


_register_all()

if __name__ == "__main__":
    app()
