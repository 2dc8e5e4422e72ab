"""Every number option of the CLI refuses ``inf`` and ``nan`` at parse time (issue 32).

``click.FloatRange`` lets both through (``nan`` compares false with every bound): a
``--restart-delay inf`` slept for ever after the first crash, a ``--stall-after nan`` made a
stall that never comes. The options are found by walking the command tree, so a new one is
covered as soon as it exists.
"""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from badput.cli import main


def _float_options(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _float_options(command, (*path, name))
            continue
        for param in command.params:
            numeric = isinstance(param.type, click.FloatRange) or param.type is click.FLOAT
            if isinstance(param, click.Option) and numeric:
                yield (*path, name, param.opts[0])


OPTIONS = sorted(_float_options(main))


def test_the_walk_finds_the_options_of_issue_32() -> None:
    found = set(OPTIONS)
    for expected in [
        ("demo", "--restart-delay"),
        ("watch", "--stall-after"),
        ("watch", "--interval"),
        ("monitor", "--interval"),
        ("run", "--restart-delay"),
        ("report", "--stall-after"),
    ]:
        assert expected in found


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "NaN", "Infinity"])
@pytest.mark.parametrize("option", OPTIONS, ids=" ".join)
def test_a_number_option_refuses_what_is_not_finite(option: tuple[str, ...], value: str) -> None:
    *command, flag = option
    # Parsing fails before the command reads anything: the path need not exist.
    args = [*command, f"{flag}={value}", "/nonexistent/badput-job"]
    if command == ["run"]:
        args = [*command, f"{flag}={value}", "--", "true"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (args, result.output)
    # (an infinity beyond a bound of the option is out of its range: said so)
    assert flag in result.output, result.output
    assert "not a finite number" in result.output or "not in the range" in result.output
