"""Typed, frozen configs for every entry point: defaults in a dataclass, a YAML file, ``key=value``.

Every command (``python -m learner.train``, ``scenarios.generate``, ``sim.render``...) takes
``--config FILE`` and ``key=value`` overrides (nested keys with dots: ``ppo.clip_lateral=0.1``).
Unknown keys are errors that list the valid ones; values are converted to the field's type; the
field's ``help`` metadata is the CLI help. The resolved config is plain data (``to_dict``), saved
with every run and checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config key or value that cannot be used; the message names the key."""


def field(default: Any = dataclasses.MISSING, help: str = "", **kw) -> Any:
    """A dataclass field with CLI help. Mutable defaults (dict, list) are copied per instance."""
    if isinstance(default, dict | list):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return dataclasses.field(default_factory=lambda d=default: d, metadata={"help": help}, **kw)
    return dataclasses.field(default=default, metadata={"help": help}, **kw)


def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


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
        raise ConfigError(f"{key}: {value!r} does not fit {tp}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, prefix=key + ".")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key}: expected one of {list(args)}, got {value!r}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not f.is_integer():
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(f)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if f != f or f in (float("inf"), float("-inf")):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return f
    if tp is str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
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
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{key}: cannot convert {value!r} to {tp}")


def from_dict(cls, data: dict, prefix: str = ""):
    """Build dataclass ``cls`` from a nested mapping; unknown keys are errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names, key=str)  # (YAML keys may be ints)
    if unknown:
        raise ConfigError(f"unknown config key {prefix}{unknown[0]}; valid keys here: {', '.join(sorted(names))}")
    kwargs = {k: _convert(v, hints[k], prefix + k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{prefix.rstrip('.') or cls.__name__}: {e}") from None


def to_dict(cfg) -> dict:
    """Plain nested dict (tuples as lists) of a config: what is saved and printed."""

    def plain(v):
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, Path):
            return str(v)
        return v

    return plain(cfg)


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


def parse_overrides(items: Sequence[str]) -> dict:
    """``["a.b=1", "c=x"]`` -> nested dict of YAML-parsed values."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        k, v = item.split("=", 1)
        if not k:
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            parsed = yaml.safe_load(v) if v != "" else ""
        except yaml.YAMLError:
            parsed = v
        except RecursionError:
            raise ConfigError(f"override {item[:60]!r}...: value nested too deeply") from None
        set_path(out, k.strip(), parsed)
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


def describe(cls, prefix: str = "") -> list[str]:
    """Help lines ``key (type, default): help`` for every field, nested sections included."""
    lines = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            lines += describe(tp, prefix + f.name + ".")
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "required"
        t = getattr(tp, "__name__", str(tp)).replace("typing.", "")
        lines.append(f"  {prefix}{f.name} ({t}, default {default!r}): {f.metadata.get('help', '')}")
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
    data = load_yaml(config_file) if config_file else {}
    if extra:
        data = merge(data, extra)
    data = merge(data, parse_overrides(overrides))
    return from_dict(cls, data)


def parse_cli(cls, argv: Sequence[str] | None, prog: str, description: str, flags=None):
    """Parse ``[--config FILE] [flags] key=value...`` into a ``cls`` instance.

    flags: optional list of (flag, dest_key, help) for dedicated options such as ``--out DIR`` that
    set config keys. Errors print the message and exit with status 2, like argparse.
    """
    parser = build_parser(cls, prog, description)
    for flag, dest, helptext in flags or ():
        parser.add_argument(flag, dest=dest.replace(".", "__"), default=None, help=helptext)
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    extra: dict = {}
    for _flag, dest, _ in flags or ():
        v = getattr(args, dest.replace(".", "__"))
        if v is not None:
            set_path(extra, dest, yaml.safe_load(v) if isinstance(v, str) and v else v)
    try:
        return resolve(cls, args.config, args.overrides, extra)
    except ConfigError as e:
        parser.error(str(e))
