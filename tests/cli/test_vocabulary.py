"""One CLI vocabulary: the same option name for the same thing in every command."""

from __future__ import annotations

import click
import typer.main

from klineage.cli.main import app


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.update(_commands(command, f"{prefix}{name} "))
        else:
            found[prefix + name] = command
    return found


def test_each_thing_has_one_option_name_across_commands() -> None:
    commands = _commands(typer.main.get_command(app))  # type: ignore[arg-type]
    assert {"validate", "optimize", "walk", "search"} <= set(commands)
    for name, command in commands.items():
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            names = set(param.opts)
            if "-o" in names:  # an output file
                assert "--output" in names, (name, param.opts)
            if param.name in ("validator", "validator_url") or "--validator" in names:
                assert param.opts[0] == "--validator", (name, param.opts)
            if "--workload" in names:
                assert "-w" in names or name.startswith("validator "), (name, param.opts)
    assert commands["validate"].params and any("--validator" in p.opts for p in commands["validate"].params)
