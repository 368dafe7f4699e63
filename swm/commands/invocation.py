"""A command's invocation as a user types it: the line that reruns a run, and its options as a config file.

Both are built from click's own parameters, never from their Python names: an option is written by
its long name (``--out``, not ``out_dir``), a flag by its on or off name (``--no-shared-prefix``), a
repeated option once per value, a number at its own precision (``repr``: 2e-4 is ``0.0002``, not
``0.000``), a value of a type that converts what it reads (`Spelled`: ``--levels easy,hard`` is a
list once read) as it was typed. Only what was given is written, on the command line, in the
environment or in a config file: a default is left out, so a rerun takes the defaults of its day.
A key in a URL is written ``***`` (`swm.credentials` reads the key from the environment for such a
URL) and a database URL's password is left out (libpq reads ``PGPASSWORD`` or ``~/.pgpass``).

``--config FILE`` (`config_option`) reads a TOML or YAML file whose keys are the options' long names,
with dashes or underscores, into click's ``default_map``: an option given on the command line wins
over the file, and a key no option has is refused in one line that names it.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import yaml
from click.core import ParameterSource

from swm.credentials import redact_text
from swm.errors import InputError
from swm.inputs import read_text_file

F = Callable[..., Any]
CONFIG_SUFFIXES = (".toml", ".yaml", ".yml")
_DATABASE_URL = re.compile(r"^(postgres(?:ql)?://)([^/@]*)@([^?#]*)(\?[^#]*)?")


class Spelled(click.ParamType):
    """A parameter type that reads text into another value (a list, a bool) and spells that value back.

    ``convert`` must take its own output too (click converts a config file's value, and a default, the
    same way), so a value written by `spell` or `config_value` reads back to what it was.
    """

    def spell(self, value: Any) -> str:
        """Return the text a user types for ``value``."""
        raise NotImplementedError

    def config_value(self, value: Any) -> Any:
        """Return ``value`` as a config file holds it: as typed, by default."""
        return self.spell(value)


def given(ctx: click.Context, name: str) -> bool:
    """Say whether parameter ``name`` was given: on the command line, in the environment or in a config file."""
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


def hidden(text: str) -> str:
    """Return a value as a rerun line or a config may hold it: no key, no database password.

    A database URL's user moves to its query (``postgresql://host/db?user=swm``), its password goes: a user
    in a URL's userinfo reads as a key to `redact_text` (``https://KEY@host``), which every store write calls.
    """
    found = _DATABASE_URL.match(text)
    if found:
        scheme, userinfo, rest, query = found.groups()
        user, query = userinfo.partition(":")[0], (query or "?").rstrip("&")
        if user:  # as percent-encoded in the userinfo, so in the query
            query += ("&" if len(query) > 1 else "") + f"user={user}"
        text = f"{scheme}{rest}{query if len(query) > 1 else ''}{text[found.end():]}"
    return redact_text(text)


def long_name(names: list[str]) -> str:
    """Return the name a user types for an option: its first long one (``--concurrency``), else its first."""
    return next((n for n in names if n.startswith("--")), names[0])


def _text(param: click.Parameter, value: Any) -> str:
    if isinstance(param.type, Spelled):
        return hidden(param.type.spell(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, os.PathLike):
        return hidden(os.fspath(value))
    return hidden(str(value))


def _items(param: click.Parameter, value: Any) -> list[list[Any]]:
    """Return a value as the groups of tokens it is typed in: one group per use of the option."""
    uses = list(value) if param.multiple else [value]
    return [list(use) if param.nargs != 1 else [use] for use in uses]


def given_values(ctx: click.Context) -> list[tuple[click.Parameter, Any]]:
    """Return the parameters given to this invocation (see `given`) with their values, in the command's order."""
    return [(p, ctx.params[p.name]) for p in ctx.command.params
            if p.expose_value and p.name in ctx.params and given(ctx, p.name)
            and (ctx.params[p.name] is not None or isinstance(p.type, Spelled))]  # a Spelled type spells None


def option_tokens(param: click.Option, value: Any) -> list[str]:
    """Return the tokens that give ``value`` to ``param`` on a command line."""
    name = long_name(param.opts)
    if param.count:
        return [name] * int(value)
    if param.is_bool_flag:
        off = [n for n in param.secondary_opts if n.startswith("--")] or param.secondary_opts
        return [name] if value else [long_name(off)] if off else []
    if param.is_flag:
        return [name] if value == param.flag_value else []
    return [token for use in _items(param, value) for token in (name, *(_text(param, v) for v in use))]


def command_words(ctx: click.Context) -> list[str]:
    """Return the command as a user types it (``swm bench tom``), whatever name the program was started by."""
    return ["swm", *ctx.command_path.split()[1:]]


def rerun_line(ctx: click.Context) -> str:
    """Return the shell command that runs this invocation again (``swm …``), quoted for a POSIX shell."""
    tokens, positional = command_words(ctx), []
    for param, value in given_values(ctx):
        if isinstance(param, click.Option):
            tokens += option_tokens(param, value)
        else:
            positional += [_text(param, v) for use in _items(param, value) for v in use]
    if any(p.startswith("-") and p != "-" for p in positional):
        positional.insert(0, "--")
    return shlex.join(tokens + positional)


def config_key(param: click.Parameter) -> str:
    """Return the key a config file gives ``param`` under: its long option name without the dashes."""
    return long_name(param.opts).lstrip("-") if isinstance(param, click.Option) else str(param.name)


def _config_value(param: click.Parameter, value: Any) -> Any:
    if isinstance(param, click.Option) and (param.is_flag or param.count):
        return value
    if isinstance(param.type, Spelled):
        return [param.type.config_value(v) for v in value] if param.multiple else param.type.config_value(value)
    if isinstance(value, list | tuple):
        return [_config_value(param, v) for v in value] if param.multiple or param.nargs != 1 else value
    if isinstance(value, bool | int | float):
        return value
    return hidden(os.fspath(value) if isinstance(value, os.PathLike) else str(value))


def config_of(ctx: click.Context) -> dict[str, Any]:
    """Return this invocation's given options as a config file holds them (``{"train-lr": 0.0002, …}``)."""
    return {config_key(p): _config_value(p, v) for p, v in given_values(ctx)}


def takes_config(command: click.Command) -> bool:
    """Say whether a command reads ``--config FILE``."""
    return any(p.name == "config" and not p.expose_value for p in command.params)


def read_config(path: str | Path) -> dict[str, Any]:
    """Read a TOML or YAML config file into its table of options (one-line errors for a file that is not one)."""
    suffix = Path(path).suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise InputError(f"--config {path}: a config file ends in .toml, .yaml or .yml",
                         "write the options as TOML (train-lr = 2e-4) or YAML (train-lr: 2.0e-4)")
    text = read_text_file(path)
    try:
        values = tomllib.loads(text) if suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        problem = " ".join(str(exc).split())
        raise InputError(f"--config {path} is not valid {'TOML' if suffix == '.toml' else 'YAML'}: {problem}",
                         "fix the file") from exc
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise InputError(f"--config {path} holds a {type(values).__name__}, not a table of options",
                         "write one key per option: train-lr = 2e-4")
    return values


def config_defaults(command: click.Command, ctx: click.Context, values: Mapping[str, Any],
                    source: str) -> dict[str, Any]:
    """Return a config file's ``values`` as click's ``default_map`` of ``command`` (keys its parameters' names).

    Each value is converted by its option's type here, so a bad one is refused in one line naming the
    file, the key and the reason; a key no option has, or one given twice (``train-lr`` and ``train_lr``),
    likewise. A flag may be given by its off name too (``no-shared-prefix = true``).
    """
    params = {p.name: p for p in command.params if p.expose_value and p.name}
    keys: dict[str, str] = {}  # a key as typed, dashes for underscores -> the parameter's name
    negations: dict[str, str] = {}  # a flag's off name (no-shared-prefix) -> the parameter's name
    for p in params.values():
        if isinstance(p, click.Option):
            keys.update({n.lstrip("-"): str(p.name) for n in p.opts if n.startswith("--")})
            negations.update({n.lstrip("-"): str(p.name) for n in p.secondary_opts if n.startswith("--")})
        else:
            keys[str(p.name).replace("_", "-")] = str(p.name)
    out: dict[str, Any] = {}
    prog = " ".join(command_words(ctx))
    for key, value in values.items():
        spelled = str(key).replace("_", "-")
        name = keys.get(spelled) or negations.get(spelled)
        if name is None:
            raise InputError(f"--config {source}: unknown key {key!r} ({prog} has no --{spelled})",
                             f"use the long names of the options `{prog} --help` lists")
        if name in out:
            raise InputError(f"--config {source}: --{config_key(params[name])} is given twice (key {key!r})",
                             "keep one of them")
        try:
            converted = params[name].type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise InputError(f"--config {source}: {key} = {value!r}: {exc.message}",
                             f"see `{prog} --help`") from None
        except InputError as exc:  # a type that checks its items itself (a comma list of levels)
            raise InputError(f"--config {source}: {key} = {value!r}: {exc.message}", exc.hint) from None
        out[name] = value if spelled in keys else not converted
    return out


def _load_config(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    defaults = config_defaults(ctx.command, ctx, read_config(value), str(value))
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def config_option(f: F) -> F:
    """Add ``--config FILE``: the command's options from a TOML or YAML file, the command line winning over it."""
    return click.option("--config", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
                        is_eager=True, expose_value=False, callback=_load_config,
                        help="Read options from a TOML or YAML file, keys named as the options (train-lr = 2e-4; "
                             "dashes or underscores); an option on the command line wins over the file. A run's "
                             "page in `swm ui` offers its config.")(f)
