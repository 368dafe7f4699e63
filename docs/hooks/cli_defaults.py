"""MkDocs hook: the CLI reference shows each option's real default, never click's ``Sentinel.UNSET``.

Click 8.3 marks an option declared without ``default=`` with an ``UNSET`` sentinel, which
mkdocs-click prints as it is. At run time such an option is None (a flag: False), so the reference
says that; an option whose default depends on the run states it in its help (``[default: …]``).
"""

from __future__ import annotations

from typing import Any

import click


def _commands(command: click.Command) -> list[click.Command]:
    found = [command]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            found += _commands(sub)
    return found


def on_config(config: Any) -> Any:
    try:
        from click._utils import UNSET  # the sentinel itself (click >= 8.3): nothing else is replaced
    except ImportError:
        return config
    from swm.cli import main

    def fix(param: click.Parameter) -> None:
        if isinstance(param, click.Option) and param.default is UNSET:
            param.default = False if param.is_flag and not param.secondary_opts else None

    def help_option(command: click.Command) -> Any:
        made = type(command).get_help_option

        def get_help_option(ctx: click.Context) -> click.Option | None:
            option = made(command, ctx)  # made anew for each context, so fixed as it is made
            if option is not None:
                fix(option)
            return option

        return get_help_option

    for command in _commands(main):
        for param in command.params:
            fix(param)
        command.get_help_option = help_option(command)  # type: ignore[method-assign]
    return config
