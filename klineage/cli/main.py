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
    # Each command group lives in its own module and adds its commands to ``app``.
    from klineage.cli import (
        agent_commands,
        kb_commands,
        list_commands,
        mcp_commands,
        neo4j_commands,
        plot_commands,
        validate_commands,
        walk_commands,
    )

    for module in (kb_commands, list_commands, validate_commands, walk_commands, neo4j_commands, plot_commands,
                   agent_commands, mcp_commands):
        module.register(app)


_register_all()

if __name__ == "__main__":
    app()
