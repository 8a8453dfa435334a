"""Typed, frozen configs for every entry point: defaults in a dataclass, a YAML file, ``key=value``.

Every command (``python -m learner.train``, ``scenarios.generate``, ``sim.render``...) takes
``--config FILE`` and ``key=value`` overrides (nested keys with dots: ``ppo.clip_lateral=0.1``).
One loader (``from_dict``) reads them all into one tree of frozen dataclasses:

- values are converted to the field's declared type (``"3"`` to 3 for an int, ``[32, 16]`` to a tuple)
  or refused with a message that names the key and says what was expected;
- an unknown key is an error that suggests the nearest valid one (``did you mean env.cameras?``) and
  lists the valid keys of its section;
- a nested dataclass is a section (``env.cameras=false``); a section may name the field that a plain
  value fills (``__scalar_field__ = "uri"``: ``store=s3://b/p`` is ``store.uri=s3://b/p``);
- ``field(..., overrides=SomeConfig)`` declares a dict of *overrides* of another config: only the keys
  given are kept (so that defaults are not forced over settings from elsewhere, such as a trained
  policy's own env settings), each checked and converted as that config's field;
- the field's ``help`` is the CLI help: ``describe`` lists every key, section fields included.

The resolved config is plain data (``to_dict``), saved with every run and checkpoint, and
``from_dict(cls, to_dict(cfg)) == cfg``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import numbers
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names the key."""


def field(default: Any = dataclasses.MISSING, help: str = "", overrides: type | None = None, **kw) -> Any:
    """A dataclass field with CLI help. Mutable defaults (dict, list) are copied per instance.

    overrides: a config dataclass; the field (a dict) then holds overrides of that config's fields: keys
    are checked against it, values converted to its field types, and only the keys given are kept.
    """
    metadata: dict[str, Any] = {"help": help}
    if overrides is not None:
        metadata["overrides"] = overrides
    if isinstance(default, dict | list):
        copy: Any = type(default)
        return dataclasses.field(default_factory=lambda: copy(default), metadata=metadata, **kw)
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return dataclasses.field(default_factory=lambda: default, metadata=metadata, **kw)
    return dataclasses.field(default=default, metadata=metadata, **kw)


def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_section(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def scalar_field(cls) -> str | None:
    """The field of section ``cls`` that a plain (non-mapping) value fills, if it declares one."""
    name = getattr(cls, "__scalar_field__", None)
    return name if isinstance(name, str) else None


def type_name(tp: Any) -> str:
    """``int``, ``str | None``, ``tuple[int, int] | None``: a type as a user reads it."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "").replace("NoneType", "None")


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(value, a, key)
            except ConfigError as e:
                errors.append(str(e))
        if len(errors) == 1 and type(None) in args:  # Optional[X]: X's own message says more
            raise ConfigError(f"{errors[0]} (or None)")
        raise ConfigError(f"{key}: expected {type_name(tp)}, got {value!r}")
    if _is_section(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping) and scalar_field(tp):
            value = {scalar_field(tp): value}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, dict(value), prefix=key + ".")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key}: expected one of {list(args)}, got {value!r}")
        return value
    if tp is bool:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        if isinstance(value, numbers.Integral) and value in (0, 1):
            return bool(value)
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool | np.bool_):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, numbers.Integral):
            return int(value)  # exact, however large
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not f.is_integer():
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(f)
    if tp is float:
        if isinstance(value, bool | np.bool_):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if f != f or f in (float("inf"), float("-inf")):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return f
    if tp is str:  # (a number typed on the command line stays text: see parse_override)
        if isinstance(value, Path):
            return str(value)
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if origin in (tuple, list, Sequence) or tp in (tuple, list):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""] if value else []
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        if args and not (len(args) == 2 and args[1] is Ellipsis) and origin is tuple:
            if len(args) != len(value):
                raise ConfigError(f"{key}: expected {len(args)} items, got {len(value)}")
            return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        inner = args[0] if args else Any
        out = [_convert(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple or tp is tuple else out
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{key}: cannot convert {value!r} to {type_name(tp)}")


def _check_keys(cls, data: Mapping, prefix: str) -> None:
    """Unknown keys are errors: each named, with the nearest valid key when there is one."""
    names = sorted(f.name for f in dataclasses.fields(cls) if f.init)
    unknown = sorted(set(data) - set(names), key=str)  # (YAML keys may be ints)
    if not unknown:
        return
    parts = []
    for k in unknown:
        close = [prefix + c for c in difflib.get_close_matches(str(k), names, n=1)] or _nested_key(cls, str(k), prefix)
        parts.append(f"unknown config key {prefix}{k}" + (f" (did you mean {close[0]}?)" if close else ""))
    raise ConfigError(f"{'; '.join(parts)}; valid keys here: {', '.join(names)}")


def _nested_key(cls, name: str, prefix: str, depth: int = 2) -> list[str]:
    """``name`` as a key of one of ``cls``'s sections (``tensorboard`` -> ``tracking.tensorboard``): the
    suggestion for a key that moved into a section."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if not _is_section(tp) or depth == 0:
            continue
        if name in {g.name for g in dataclasses.fields(tp)}:
            return [f"{prefix}{f.name}.{name}"]
        deeper = _nested_key(tp, name, f"{prefix}{f.name}.", depth - 1)
        if deeper:
            return deeper
    return []


def from_dict(cls, data: Mapping, prefix: str = ""):
    """Build dataclass ``cls`` from a nested mapping: the one loader of every config.

    Unknown keys are errors (with a suggestion); values are converted to the field types; sections
    (nested dataclasses) are built the same way, a plain value filling their ``__scalar_field__``;
    ``overrides`` fields are checked against their config. ``prefix`` is the dotted path of ``cls``
    in the tree, for the messages.
    """
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    _check_keys(cls, data, prefix)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for f in fields.values():
        if f.init and f.name not in data and _default(f) is dataclasses.MISSING:
            raise ConfigError(f"missing config key {prefix}{f.name}: {f.metadata.get('help', '')}".rstrip(": "))
    kwargs = {}
    for k, v in data.items():
        tp, target = hints[k], fields[k].metadata.get("overrides")
        if target is not None:
            kwargs[k] = overrides_dict(target, v, prefix + k + ".")
            continue
        if _is_section(tp) and not isinstance(v, tp):
            if not isinstance(v, Mapping) and scalar_field(tp):
                v = {scalar_field(tp): v}
            base = _default(fields[k])
            if isinstance(v, Mapping) and isinstance(base, tp):  # keys given update the field's own default
                v = merge(non_defaults(base), dict(v))
        kwargs[k] = _convert(v, tp, prefix + k)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        where = prefix.rstrip(".") or cls.__name__
        msg = str(e)
        raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def overrides_dict(cls, data: Any, prefix: str = "") -> dict:
    """Overrides of config ``cls``: the keys of ``data``, each converted to its field's type, checked
    together on ``cls``'s defaults (unknown keys and bad values are errors). Returns only the keys given."""
    if data is None:
        return {}
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = to_dict(data)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping of {cls.__name__} keys, got {data!r}")
    _check_keys(cls, data, prefix)
    hints = _hints(cls)
    out = {k: _convert(v, hints[k], prefix + k) for k, v in data.items()}
    from_dict(cls, out, prefix)  # together, as the config checks them (ranges, cross-field rules)
    return out


def coerce_fields(obj, name: str | None = None) -> None:
    """In a dataclass's ``__post_init__``: every field converted to its declared type (numpy scalars
    made plain, lists made tuples) or a ConfigError naming ``<name>.<field>``, so that a config built
    directly, not by ``from_dict``, is held to the same types."""
    name = name or type(obj).__name__
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        object.__setattr__(obj, f.name, _convert(getattr(obj, f.name), hints[f.name], f"{name}.{f.name}"))


def to_dict(cfg) -> dict:
    """Plain nested dict (tuples as lists) of a config: what is saved and printed."""

    def plain(v):
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, Path):
            return str(v)
        return v

    return plain(cfg)


def non_defaults(cfg) -> dict:
    """The fields of config ``cfg`` that differ from a default instance of its class, as plain data
    (sections recursively): the overrides that rebuild it. What a section's own default (such as a
    benchmark's ``EnvConfig(rig="front3")``) contributes under the keys given for it, and a training env's
    settings handed to an evaluation as overrides. Values a config derives (PolicyConfig's default
    strides) are left out as long as what they derive from is."""
    try:
        fresh = type(cfg)()
    except (TypeError, ValueError):  # required fields: everything counts
        return to_dict(cfg)
    out = {}
    for f in dataclasses.fields(cfg):
        value, default = getattr(cfg, f.name), getattr(fresh, f.name)
        if value == default:
            continue
        if _is_section(type(value)) and type(value) is type(default):
            out[f.name] = non_defaults(value)
        else:
            out[f.name] = to_dict({"v": value})["v"]
    return out


def set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = data
    for k in keys[:-1]:
        nxt = cur.setdefault(k, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{dotted}: {k} is not a section")
        cur = nxt
    cur[keys[-1]] = value


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def expand_shorthand(cls, data: Any) -> Any:
    """``data`` with a plain value given for a section that declares a ``__scalar_field__`` turned into
    ``{field: value}``, at every depth: what lets ``--store URI`` and ``store.keep_last=5`` (or a YAML
    file's ``store: {keep_last: 5}``) merge instead of one replacing the other."""
    if not isinstance(data, dict) or not _is_section(cls):
        return data
    hints = _hints(cls)
    out = dict(data)
    for k, v in data.items():
        tp = hints.get(k) if isinstance(k, str) else None
        if tp is None or not _is_section(tp):
            continue
        if not isinstance(v, dict) and not isinstance(v, tp) and scalar_field(tp):
            out[k] = {scalar_field(tp): v}
        else:
            out[k] = expand_shorthand(tp, v)
    return out


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    except RecursionError:
        raise ConfigError(f"{text[:60]!r}...: value nested too deeply") from None


def _is_text(tp: Any) -> bool:
    """A str field, or an Optional one."""
    return tp is str or (typing.get_origin(tp) in (typing.Union, types.UnionType) and str in typing.get_args(tp))


def _typed_value(cls, key: str, text: str) -> Any:
    """A value typed on the command line: YAML (``false``, ``[32, 16]``, ``1e-4``), except that a number
    or true/false given for a text field stays the text as typed (``run=0042``, ``env.rig=5``)."""
    parsed = _yaml_value(text) if text != "" else ""
    if cls is not None and isinstance(parsed, bool | int | float) and _is_text(_field_type(cls, key)):
        return text
    return parsed


def parse_override(item: str, cls=None) -> dict:
    """``"a.b=1"`` -> ``{"a": {"b": 1}}``, the value parsed as YAML (``false``, ``[32, 16]``, ``1e-4``);
    with ``cls``, a number given for a text field stays text."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not key=value")
    k, v = item.split("=", 1)
    if not k:
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        parsed = _typed_value(cls, k.strip(), v)
    except ConfigError:
        raise ConfigError(f"override {item[:60]!r}...: value nested too deeply") from None
    out: dict = {}
    set_path(out, k.strip(), parsed)
    return out


def parse_overrides(items: Sequence[str], cls=None) -> dict:
    """``["a.b=1", "c=x"]`` -> nested dict of YAML-parsed values, later items over earlier ones
    (with ``cls``, section shorthands are expanded first: ``store=URI store.keep_last=5`` keeps both)."""
    out: dict = {}
    for item in items:
        one = parse_override(item, cls)
        out = merge(out, expand_shorthand(cls, one) if cls is not None else one)
    return out


def load_yaml(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {p}: not UTF-8 text ({e})") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {p}: not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"config file {p}: YAML nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p}: expected a mapping at the top level")
    return data


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def describe(cls, prefix: str = "", defaults: Any = None) -> list[str]:
    """Help lines ``key (type, default): help`` for every field, sections and overrides included.

    defaults: an instance of ``cls`` whose values are shown as the defaults (a section's default may
    differ from its class's own, as ``EnvConfig(rig="front3")`` in a benchmark).
    """
    lines = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        default = getattr(defaults, f.name) if defaults is not None else _default(f)
        helptext = f.metadata.get("help", "")
        target = f.metadata.get("overrides")
        if _is_section(tp):
            short = f" ({f.name}=VALUE sets {f.name}.{scalar_field(tp)})" if scalar_field(tp) else ""
            lines.append(f"  {prefix}{f.name}.*: {helptext}{short}")
            lines += describe(tp, prefix + f.name + ".", default if isinstance(default, tp) else None)
            continue
        if target is not None:
            lines.append(f"  {prefix}{f.name}.*: {helptext} (overrides: only the keys given are set)")
            lines += [line.replace(", default ", ", if unset ", 1) for line in describe(target, prefix + f.name + ".")]
            continue
        shown = "required" if default is dataclasses.MISSING else f"default {default!r}"
        lines.append(f"  {prefix}{f.name} ({type_name(tp)}, {shown}): {helptext}")
    return lines


def build_parser(cls, prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="settings (key=value, nested with dots):\n" + "\n".join(describe(cls)),
    )
    p.add_argument("--config", help="YAML file with settings (overridden by key=value arguments)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="settings, e.g. seed=3")
    return p


def resolve(cls, config_file: str | None, overrides: Sequence[str], extra: dict | None = None):
    """Defaults <- YAML file <- ``extra`` (from dedicated flags) <- key=value overrides."""
    data = expand_shorthand(cls, load_yaml(config_file) if config_file else {})
    if extra:
        data = merge(data, expand_shorthand(cls, extra))
    data = merge(data, parse_overrides(overrides, cls))
    return from_dict(cls, data)


def _field_type(cls, dotted: str) -> Any:
    """The declared type of dotted key ``dotted`` in config ``cls`` (None if there is no such key); a
    section with a ``__scalar_field__`` answers for that field, an ``overrides`` dict for its config's."""
    tp: Any = cls
    for k in dotted.split("."):
        if not _is_section(tp):
            return None
        f = next((f for f in dataclasses.fields(tp) if f.name == k), None)
        if f is None:
            return None
        tp = f.metadata.get("overrides") or _hints(tp)[k]
    scalar = scalar_field(tp) if _is_section(tp) else None
    return _hints(tp)[scalar] if scalar else tp


def parse_cli(cls, argv: Sequence[str] | None, prog: str, description: str, flags=None):
    """Parse ``[--config FILE] [flags] key=value...`` into a ``cls`` instance.

    flags: optional list of (flag, dest_key, help) for dedicated options such as ``--out DIR`` that
    set config keys (flag: one name or a tuple, ``("-q", "--quiet")``); a flag for a bool key takes no
    value (``--json`` is ``json=true``). Errors print the message and exit with status 2, like argparse.
    """
    parser = build_parser(cls, prog, description)
    for flag, dest, helptext in flags or ():
        names = (flag,) if isinstance(flag, str) else tuple(flag)
        if _field_type(cls, dest) is bool:
            parser.add_argument(*names, dest=dest.replace(".", "__"), action="store_const", const=True, help=helptext)
        else:
            metavar = dest.split(".")[-1].upper()
            parser.add_argument(*names, dest=dest.replace(".", "__"), default=None, metavar=metavar, help=helptext)
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    extra: dict = {}
    for _flag, dest, _ in flags or ():
        v = getattr(args, dest.replace(".", "__"))
        if v is not None:
            set_path(extra, dest, _typed_value(cls, dest, v) if isinstance(v, str) and v else v)
    try:
        return resolve(cls, args.config, args.overrides, extra)
    except ConfigError as e:
        parser.error(str(e))
