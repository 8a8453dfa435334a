"""sim.configs, the one loader of every config: sections, the scalar shorthand, overrides, suggestions,
conversions, the generated help, and to_dict -> from_dict round trips."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from sim.configs import (
    ConfigError,
    coerce_fields,
    describe,
    field,
    from_dict,
    non_defaults,
    overrides_dict,
    parse_cli,
    resolve,
    to_dict,
)


@dataclass(frozen=True)
class Box:
    __scalar_field__ = "uri"

    uri: str = field("here", help="where the box is")
    keep: int = field(3, help="how many to keep")

    def __post_init__(self):
        if self.keep < 1:
            raise ValueError(f"keep: expected >= 1, got {self.keep}")


@dataclass(frozen=True)
class Part:
    size: tuple[int, int] | None = field(None, help="width and height")
    on: bool = field(True, help="switched on")
    name: str | None = field(None, help="a name")


@dataclass(frozen=True)
class Top:
    seed: int = field(0, help="the seed")
    rate: float = field(0.5, help="a rate")
    label: str = field("", help="a label")
    box: Box = field(Box(), help="the box section")
    part: Part = field(Part(), help="the part section")
    tweaks: dict = field({}, help="overrides of a part", overrides=Part)
    json: bool = field(False, help="print JSON")


def test_nested_sections_are_typed_and_converted():
    cfg = from_dict(Top, {"seed": "3", "part": {"size": [32, 16], "on": "false"}, "box": {"keep": 5.0}})
    assert cfg.seed == 3 and cfg.part == Part(size=(32, 16), on=False) and cfg.box == Box("here", 5)
    assert isinstance(cfg.part, Part) and isinstance(cfg.box.keep, int)


def test_a_plain_value_fills_the_sections_scalar_field():
    assert from_dict(Top, {"box": "s3://b/p"}).box == Box(uri="s3://b/p", keep=3)
    # with dotted overrides, in either order, and over a YAML file's section: the parts merge
    assert resolve(Top, None, ["box=s3://b/p", "box.keep=5"]).box == Box("s3://b/p", 5)
    assert resolve(Top, None, ["box.keep=5", "box=s3://b/p"]).box == Box("s3://b/p", 5)
    assert resolve(Top, None, ["box.keep=7"], extra={"box": "/flag"}).box == Box("/flag", 7)
    with pytest.raises(ConfigError, match=r"part: expected a mapping for Part, got 'x'"):
        from_dict(Top, {"part": "x"})  # no scalar field declared: a mapping is needed


def test_the_shorthand_merges_with_a_yaml_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("box: {keep: 9}\nseed: 4\n")
    cfg = resolve(Top, str(path), ["box=/over"])
    assert cfg.box == Box("/over", 9) and cfg.seed == 4
    path.write_text("box: /file\n")
    assert resolve(Top, str(path), ["box.keep=2"]).box == Box("/file", 2)


def test_unknown_keys_suggest_the_nearest_and_list_the_section():
    with pytest.raises(ConfigError) as e:
        from_dict(Top, {"part": {"sise": [1, 2]}})
    assert "unknown config key part.sise (did you mean part.size?)" in str(e.value)
    assert "valid keys here: name, on, size" in str(e.value)
    with pytest.raises(ConfigError, match=r"unknown config key sead \(did you mean seed\?\)"):
        resolve(Top, None, ["sead=1"])
    with pytest.raises(ConfigError, match=r"unknown config key zzz; valid keys here: box, json, label"):
        from_dict(Top, {"zzz": 1})  # nothing near: no suggestion
    with pytest.raises(ConfigError, match=r"unknown config key tweaks.onn \(did you mean tweaks.on\?\)"):
        from_dict(Top, {"tweaks": {"onn": True}})


def test_errors_name_the_key_and_what_was_expected():
    cases = [
        ({"seed": "x"}, "seed: expected an integer, got 'x'"),
        ({"seed": 1.5}, "seed: expected an integer, got 1.5"),
        ({"rate": float("nan")}, "rate: expected a finite number"),
        ({"part": {"size": [1]}}, r"part.size: expected 2 items, got 1 \(or None\)"),
        ({"part": {"on": "maybe"}}, "part.on: expected true/false, got 'maybe'"),
        ({"label": 5}, "label: expected a string, got 5"),
        ({"box": {"keep": 0}}, "box: keep: expected >= 1, got 0"),
    ]
    for data, match in cases:
        with pytest.raises(ConfigError, match=match):
            from_dict(Top, data)


def test_numbers_typed_for_a_text_field_stay_text():
    cfg = resolve(Top, None, ["label=0042", "part.name=5", "tweaks.name=1e3", "seed=42"])
    assert cfg.label == "0042" and cfg.part.name == "5" and cfg.tweaks == {"name": "1e3"} and cfg.seed == 42
    assert resolve(Top, None, ["part.name=null"]).part.name is None


def test_exact_integers_and_numpy_scalars():
    cfg = from_dict(Top, {"seed": 2**65 + 1, "rate": np.float32(0.25), "part": {"on": np.bool_(False)}})
    assert cfg.seed == 2**65 + 1 and type(cfg.rate) is float and cfg.rate == 0.25
    assert cfg.part.on is False


def test_overrides_keep_only_the_keys_given_checked_as_the_config_does():
    cfg = from_dict(Top, {"tweaks": {"size": [8, 4], "on": "no"}})
    assert cfg.tweaks == {"size": (8, 4), "on": False}  # converted, nothing else filled in
    assert from_dict(Top, {}).tweaks == {}
    with pytest.raises(ConfigError, match=r"tweaks.size: expected 2 items"):
        from_dict(Top, {"tweaks": {"size": [1, 2, 3]}})
    assert overrides_dict(Part, {"on": 0}, "p.") == {"on": False}
    with pytest.raises(ConfigError, match=r"p\.size\[0\]: expected an integer"):
        overrides_dict(Part, {"size": "a,b"}, "p.")


def test_round_trip_to_dict_from_dict_gives_an_equal_config():
    cfg = resolve(Top, None, ["seed=7", "box=/x", "box.keep=2", "part.size=[3,4]", "tweaks.on=false", "label=a b"])
    plain = to_dict(cfg)
    assert plain["part"]["size"] == [3, 4] and plain["box"] == {"uri": "/x", "keep": 2}
    assert from_dict(Top, plain) == cfg
    assert from_dict(Top, to_dict(Top())) == Top()


def test_describe_lists_sections_overrides_and_help():
    lines = describe(Top)
    text = "\n".join(lines)
    assert "  seed (int, default 0): the seed" in lines
    assert "  box.*: the box section (box=VALUE sets box.uri)" in lines
    assert "  box.keep (int, default 3): how many to keep" in lines
    assert "  part.size (tuple[int, int] | None, default None): width and height" in lines
    assert "  tweaks.*: overrides of a part (overrides: only the keys given are set)" in lines
    assert "  tweaks.on (bool, if unset True): switched on" in lines
    assert text.count("  part.") == 4 and text.count("  tweaks.") == 4  # the section's line and its three keys


def test_parse_cli_flags_help_and_errors(capsys):
    cfg = parse_cli(
        Top, ["--box", "/b", "--json", "seed=2"], "prog", "d", flags=[("--box", "box", "b"), ("--json", "json", "j")]
    )
    assert cfg.box == Box("/b", 3) and cfg.json is True and cfg.seed == 2
    assert parse_cli(Top, [], "prog", "d", flags=[("--json", "json", "j")]).json is False
    with pytest.raises(SystemExit) as e:
        parse_cli(Top, ["--help"], "prog", "d")
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "box.keep (int, default 3): how many to keep" in out and "tweaks.size" in out
    with pytest.raises(SystemExit) as e:
        parse_cli(Top, ["part.sise=1"], "prog", "d")
    assert e.value.code == 2 and "did you mean part.size?" in capsys.readouterr().err


def test_coerce_fields_and_non_defaults():
    @dataclass(frozen=True)
    class Checked:
        n: int = field(1, help="n")
        size: tuple[int, int] | None = field(None, help="size")

        def __post_init__(self):
            coerce_fields(self)

    assert Checked(n=np.int64(4), size=[2, 3]) == Checked(4, (2, 3))
    assert type(Checked(n=np.int64(4)).n) is int
    with pytest.raises(ConfigError, match=r"Checked.n: expected an integer, got 'x'"):
        Checked(n="x")
    assert non_defaults(Part(size=(1, 2))) == {"size": [1, 2]}
    assert non_defaults(Part()) == {}


def test_keys_given_for_a_section_update_that_fields_own_default():
    @dataclass(frozen=True)
    class Bench:
        part: Part = field(Part(size=(4, 2), name="bench"), help="a part with defaults of its own")
        top: Top = field(Top(seed=5, box=Box(keep=9)), help="a nested tree with defaults of its own")

    cfg = resolve(Bench, None, ["part.on=false", "top.box=/b", "top.rate=0.1"])
    assert cfg.part == Part(size=(4, 2), on=False, name="bench")
    assert cfg.top.seed == 5 and cfg.top.box == Box("/b", 9) and cfg.top.rate == 0.1
    assert from_dict(Bench, {}) == Bench() and from_dict(Bench, to_dict(cfg)) == cfg
    assert non_defaults(cfg) == {"part": {"size": [4, 2], "on": False, "name": "bench"}, "top": non_defaults(cfg.top)}
    assert non_defaults(cfg.top) == {"seed": 5, "rate": 0.1, "box": {"uri": "/b", "keep": 9}}
