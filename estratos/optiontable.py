"""Each stage's options declared once, as the fields of its frozen configuration.

Why one table: an option of ``encode``, ``probe`` or ``baseline`` is needed in five places
(the command's click option, the configuration's field, the check that refuses a bad value,
the words that write it back for a job script or a hint, and ``estratos slurm``, which runs
the stages). Declared once as a dataclass field whose metadata is an :class:`Option`
(:func:`option`), every one of those comes from the field:

- :func:`click_options` decorates a command with the click options of a configuration
  (``slurm`` takes the same ones, renamed where two stages share a flag);
- :func:`check_fields` runs each given value through its option's ``check``, so every
  configuration's ``build`` refuses a value with the same wording
  (:class:`~estratos.errors.OptionError` naming the flag);
- :func:`to_options` writes a configuration back as ``(flag, value)`` pairs, which
  :meth:`~estratos.commandline.Command.argv` turns into quoted words.

What a configuration's ``build`` keeps for itself is only what involves several options at
once (``--control-l2 task`` needs ``--control``; ``--encoder`` refuses the model-loading
options). Each option also says its :class:`Role`: whether it is part of what a cell or a
cache computes, only how the computation runs, or how one run is placed. Standard library
only (click is imported when :func:`click_options` is called): the configurations are built
before numpy or torch load.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from estratos.errors import OptionError
from estratos.registry import unknown_name

#: the metadata key under which a configuration field holds its :class:`Option`
OPTION_KEY = "estratos.option"
#: ``(flag, value)``: one option of a command line; a flag that takes no value has None
OptionPair = Tuple[str, Optional[str]]


class Role(enum.Enum):
    """What an option is to the results.

    - ``IDENTITY``: part of what a cell or a cache computes (another value, other numbers):
      always written back and taken by every command that runs the stage (``slurm``).
    - ``EXECUTION``: how the same numbers are computed (the device, a batch budget, training
      models one at a time): written back when not the default, taken by ``slurm``.
    - ``PLACEMENT``: how one run is spread or resumed (processes, threads, a shard, redoing
      stored cells): set by whoever runs the command (``slurm`` sets them per job), never
      written back.
    """

    IDENTITY = "identity"
    EXECUTION = "execution"
    PLACEMENT = "placement"


@dataclass(frozen=True)
class Option:
    """One command-line option of a configuration field.

    ``flag``: the option (``--control-l2``); ``help``: its help text; ``role``: a
    :class:`Role`; ``check(value) -> value``: the checked (parsed, normalised) value, raising
    :class:`OptionError` naming ``flag``; ``text(value) -> str``: a value as the option's
    text (default ``str``; for ``multiple``, one item); ``is_flag``: a boolean switch;
    ``multiple``: repeatable, the field holding a tuple; ``choices``: the accepted words
    (click shows them; :func:`choice` checks them); ``click_type``: a factory of another
    click parameter type (:mod:`estratos.clitypes`); ``metavar``; ``default_help``: the
    default as the help says it when the field's own default is resolved by ``build`` (e.g.
    "the classifier's own"); ``cli_default``: what the command line passes when the option
    is absent, where that differs from the field's default (``--shard``: ``auto``, the SLURM
    array's task); ``always``: written back even at its default (what names a probe cell:
    its layers, seeds, classifier and features are spelled out in every job script).
    """

    flag: str
    help: str
    role: Role = Role.IDENTITY
    check: Optional[Callable[[Any], Any]] = None
    text: Optional[Callable[[Any], str]] = None
    is_flag: bool = False
    multiple: bool = False
    choices: Optional[Tuple[str, ...]] = None
    click_type: Optional[Callable[[], Any]] = None
    metavar: Optional[str] = None
    default_help: Optional[str] = None
    cli_default: Any = None
    always: bool = False

    def as_text(self, value: Any) -> str:
        return self.text(value) if self.text is not None else str(value)


def option(default: Any, flag: str, help: str, *, role: Role = Role.IDENTITY,
           check: Optional[Callable[[Any], Any]] = None,
           text: Optional[Callable[[Any], str]] = None, is_flag: bool = False,
           multiple: bool = False, choices: Optional[Sequence[str]] = None,
           click_type: Optional[Callable[[], Any]] = None, metavar: Optional[str] = None,
           default_help: Optional[str] = None, cli_default: Any = None,
           always: bool = False) -> Any:
    """A configuration field with its option (``dataclasses.field(default=default)`` whose
    metadata is the :class:`Option`). A field with ``choices`` and no ``check`` is checked
    against them (:func:`choice`); None always passes (the field's default)."""
    chosen = None if choices is None else tuple(choices)
    if check is None and chosen is not None:
        def check(value: Any, _flag: str = flag, _choices: Tuple[str, ...] = chosen) -> Any:
            return choice(_flag, value, _choices)
    spec = Option(flag=flag, help=help, role=role, check=check, text=text, is_flag=is_flag,
                  multiple=multiple, choices=chosen, click_type=click_type, metavar=metavar,
                  default_help=default_help, cli_default=cli_default, always=always)
    return dataclasses.field(default=default, metadata={OPTION_KEY: spec})


def choice(flag: str, value: Any, choices: Sequence[str], what: Optional[str] = None) -> Any:
    """``value`` if it is one of ``choices`` (None passes), else the one unknown-name error
    (:func:`estratos.registry.unknown_name`) naming ``flag``; ``what`` names one choice in
    the message (default: the flag's words, ``--control-l2`` -> ``control l2``)."""
    if value is None or value in choices:
        return value
    raise unknown_name(what or flag.lstrip("-").replace("-", " "), value, choices, flag)


def options_of(config: Any) -> Iterator[Tuple[dataclasses.Field[Any], Option]]:
    """The fields of a configuration class (or instance) that are options, in declaration
    order, with their :class:`Option`."""
    for field in dataclasses.fields(config):
        spec = field.metadata.get(OPTION_KEY)
        if spec is not None:
            yield field, spec


def default_of(field: dataclasses.Field[Any]) -> Any:
    """A field's default value."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise ValueError(f"option field {field.name} has no default")


def check_fields(config_cls: Any, given: Mapping[str, Any]) -> Dict[str, Any]:
    """Every field of ``config_cls``: its value in ``given`` checked by its option (a value
    of None is the field's default, unchecked), or its default. An unknown key is a
    ``TypeError`` (a programming error: the CLI passes only the table's fields)."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise TypeError(f"{config_cls.__name__}: no option {', '.join(unknown)}")
    values: Dict[str, Any] = {}
    for name, field in fields.items():
        spec = field.metadata.get(OPTION_KEY)
        value = given.get(name)
        if value is None or (spec is not None and spec.multiple and value == ()):
            values[name] = default_of(field)
        elif spec is not None and spec.check is not None:
            values[name] = spec.check(value)
        else:
            values[name] = value
    return values


def to_options(config: Any, *, roles: Sequence[Role] = (Role.IDENTITY, Role.EXECUTION),
               exclude: Sequence[str] = ()) -> List[OptionPair]:
    """The options of ``config`` whose role is in ``roles``, as ``(flag, value)`` pairs in
    declaration order: None and a value equal to its field's default are left out (unless
    the option is ``always`` written); a switch is ``(flag, None)``; a ``multiple`` option
    repeats. ``exclude``: field names left out. Parsed back by the configuration's
    ``build``, the pairs give the same configuration."""
    pairs: List[OptionPair] = []
    for field, spec in options_of(config):
        if spec.role not in roles or field.name in exclude:
            continue
        value = getattr(config, field.name)
        if value is None or (value == default_of(field) and not spec.always):
            continue
        if spec.is_flag:
            if value:
                pairs.append((spec.flag, None))
        elif spec.multiple:
            pairs += [(spec.flag, spec.as_text(item)) for item in value]
        else:
            pairs.append((spec.flag, spec.as_text(value)))
    return pairs


def flatten(pairs: Sequence[OptionPair]) -> List[str]:
    """``(flag, value)`` pairs as command-line words (a switch is its flag alone)."""
    return [word for flag, value in pairs for word in ((flag,) if value is None
                                                         else (flag, value))]


def pick(config_cls: Any, values: Dict[str, Any], *, prefix: str = "") -> Dict[str, Any]:
    """Remove from ``values`` (a command's click keywords) the options of ``config_cls``
    (their names start with ``prefix`` when :func:`click_options` added one) and return
    them by field name."""
    picked: Dict[str, Any] = {}
    for field, _spec in options_of(config_cls):
        if prefix + field.name in values:
            picked[field.name] = values.pop(prefix + field.name)
    return picked


def click_options(config_cls: Any, *, roles: Optional[Sequence[Role]] = None,
                  exclude: Sequence[str] = (), rename: Optional[Mapping[str, str]] = None,
                  prefix: str = "", help_prefix: str = "") -> Callable[[Any], Any]:
    """A decorator adding the click options of ``config_cls`` (those whose role is in
    ``roles``, all when None, less the field names in ``exclude``), in declaration order.
    The parameter of each is its field name, after ``prefix``; ``rename`` maps a field name
    to another flag (``slurm`` takes encode's ``--pooling`` as ``--encode-pooling``);
    ``help_prefix`` starts every help text (``"Encode jobs: "``). The click default is the
    field's default, shown in the help, or None where ``build`` resolves it
    (``default_help``)."""
    import click

    rename = dict(rename or {})

    def decorate(command: Any) -> Any:
        chosen = [(field, spec) for field, spec in options_of(config_cls)
                  if (roles is None or spec.role in roles) and field.name not in exclude]
        for field, spec in reversed(chosen):
            command = _click_option(click, field, spec, rename.get(field.name, spec.flag),
                                    prefix + field.name, help_prefix)(command)
        return command

    return decorate


def _click_option(click: Any, field: dataclasses.Field[Any], spec: Option, flag: str, name: str,
                  help_prefix: str) -> Any:
    default = default_of(field)
    kwargs: Dict[str, Any] = {"help": help_prefix + spec.help}
    if spec.metavar:
        kwargs["metavar"] = spec.metavar
    if spec.is_flag:
        return click.option(flag, name, is_flag=True, default=False, **kwargs)
    if spec.click_type is not None:
        kwargs["type"] = spec.click_type()
    elif spec.choices is not None:
        kwargs["type"] = click.Choice(spec.choices)
    if spec.multiple:
        return click.option(flag, name, multiple=True, **kwargs)
    if spec.cli_default is not None:
        return click.option(flag, name, default=spec.cli_default, show_default=True,
                            **kwargs)
    if spec.default_help is not None or default is None:
        if spec.default_help is not None:
            kwargs["help"] += f" [default: {spec.default_help}]"
        return click.option(flag, name, default=None, **kwargs)
    return click.option(flag, name, default=spec.as_text(default), show_default=True, **kwargs)


def reject(flag: str, message: str) -> OptionError:
    """The error of a value refused for a reason that involves other options: ``FLAG:
    message`` (the wording every configuration's ``build`` uses)."""
    return OptionError(f"{flag}: {message}")


__all__ = ["OPTION_KEY", "Option", "OptionPair", "Role", "check_fields", "choice",
           "click_options", "default_of", "flatten", "option",
           "options_of", "pick", "reject", "to_options"]
