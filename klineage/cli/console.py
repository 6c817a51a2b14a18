"""Where the CLI speaks to people: stdout for results, stderr for errors, notes and progress.

Messages carry user text (paths, manifest keys such as ``[workload.roles]``, operator tags such as
``[autotune]``) that Rich would read as markup and drop: everything here prints it verbatim.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

out = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: MESSAGE`` on stderr (the message verbatim) and return the ``typer.Exit(code)`` to raise."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def say(line: str) -> None:
    """One line of progress or a note on stderr, verbatim (stdout stays free for ``--json``)."""
    err.print(line, highlight=False, markup=False)
