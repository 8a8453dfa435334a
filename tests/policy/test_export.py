"""Policy export: package layout and policy.json, parity of ONNX / torch.export with the eager network on
random and real observations, the source resolver (store URIs, checkpoint folders, packages), refusal of
missing or corrupt checkpoints and packages, observation checks, and import isolation of policy.exported.

One tiny training checkpoint (a small ActorCritic over a real env's observation space, encoded with
learner.checkpoint and committed to a local store) is exported once per module through the CLI.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from learner import checkpoint as ckpt_io
from learner.config import TrainConfig
from learner.learner import Learner
from learner.train import learner_settings
from policy.exported import ExportError, ObservationMismatch, check_pt2_archive, load_exported
from policy.network import CAMERA_PARTS, ActorCritic, PolicyConfig, example_observation_space, random_obs
from policy.sources import PolicySourceError, parse_source, redact_tree, redact_uri, resolve_policy_source
from policy.spaces import space_from_json, space_to_json
from sim.configs import from_dict
from store import CheckpointStore

REPO = Path(__file__).resolve().parents[2]
POLICY = {"cnn_channels": [8, 16], "cnn_kernels": [3, 3], "embed_dim": 32, "hidden_dim": 64}
ENV = {"resolution": [32, 16]}  # rig left to the scenarios (front3), as training often does
RUN = "tiny"


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A one-scenario suite folder (the hand-made straight road), saved as a scenario file."""
    from scenarios.io import save
    from tests.envs.handmade import straight_scenario

    folder = tmp_path_factory.mktemp("suite")
    sc = straight_scenario(folder, sid="plain", horizon=12, n_ground=800)
    save(sc, folder / "plain.json")
    return folder


@pytest.fixture(scope="module")
def recorded(suite):
    """A real env's observation space, action spec and a batch of recorded observations [6, ...]."""
    from envs.driving import DrivingEnv

    env = DrivingEnv({**ENV, "render_backend": "cpu"}, scenarios=str(suite))
    obs, _ = env.reset(seed=0)
    frames = [obs]
    for k in range(5):
        obs, *_ = env.step(np.array([30 + (k % 3) - 1, 20]))
        frames.append(obs)
    space, spec = env.observation_space, env.action_spec
    env.close()
    batch = {key: np.stack([f[key] for f in frames]) for key in space.spaces}
    return space, spec, batch


def _trained_like(space, spec, batch, seed=0) -> ActorCritic:
    """A small ActorCritic with spread-out logits and non-trivial normalisation statistics."""
    torch.manual_seed(seed)
    net = ActorCritic(space, spec, from_dict(PolicyConfig, dict(POLICY)))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.2 * torch.randn_like(p))
    net.update_obs_stats({k: torch.from_numpy(v) for k, v in batch.items()})
    return net.eval()


def _commit(store: Path, net, config: dict, **spaces) -> int:
    learner = Learner(net, learner_settings(TrainConfig(), total_updates=1000, lr=3e-4))
    files = ckpt_io.encode(learner.state(), ckpt_io.TrainState(stage="rl", iteration=3), config, **spaces)
    return CheckpointStore(store).run(config["run"]).commit(files, {"iteration": 3, "env_steps": 100})


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, suite, recorded):
    """A store with run 'tiny' version 1, holding obs_space.json; returns (store, net, config)."""
    space, spec, batch = recorded
    store = tmp_path_factory.mktemp("store")
    net = _trained_like(space, spec, batch)
    config = {"run": RUN, "store": str(store), "suite": str(suite), "env": dict(ENV), "policy": dict(POLICY)}
    assert _commit(store, net, config, observation_space=space, action_spec=spec, rig=("front3", 32, 16)) == 1
    return store, net, config


@pytest.fixture(scope="module")
def package(tmp_path_factory, ckpt):
    """The checkpoint exported through the CLI."""
    from policy.export import main

    store, _, _ = ckpt
    out = tmp_path_factory.mktemp("export") / "pkg"
    assert main(["--policy", f"{store}/{RUN}@latest", "--out", str(out), "check_samples=8"]) == 0
    return out


def _random(space, n, seed):
    return {k: v.numpy() for k, v in random_obs(space, n, generator=torch.Generator().manual_seed(seed)).items()}


# -- the package -----------------------------------------------------------------------------------


def test_package_layout_and_policy_json(package, ckpt, recorded):
    store, net, _ = ckpt
    space, spec, _ = recorded
    assert sorted(p.name for p in package.iterdir()) == [
        "policy.json",
        "policy.onnx",
        "policy.pt2",
        "weights.safetensors",
    ]
    pj = json.loads((package / "policy.json").read_text())
    # inputs: every observation part, by name, shape without batch, dtype, with meaning/units/frame
    assert [e["name"] for e in pj["inputs"]] == list(space.spaces)
    for e in pj["inputs"]:
        assert tuple(e["shape"]) == space[e["name"]].shape and e["dtype"] == space[e["name"]].dtype.name
        assert e["meaning"] and e["units"] and e["frame"]
    assert pj["inputs"][[e["name"] for e in pj["inputs"]].index("cameras")]["dtype"] == "uint8"
    # camera mode's parts, the speed limits among them, each feature named
    by_name = {e["name"]: e for e in pj["inputs"]}
    assert set(by_name) == {"cameras", "ego", "navigation", "command", "limits"}
    assert by_name["limits"]["features"] == ["limit", "next_limit", "distance"] and by_name["limits"]["shape"] == [3]
    assert by_name["ego"]["features"] == ["speed", "yaw_rate", "accel", "steer"]
    assert [o["name"] for o in pj["outputs"]] == ["action", "logits_long", "logits_lat_all", "values"]
    # action bins and mask: metre values, the table and its band form agree with the env's ActionSpec
    a = pj["action"]
    assert (a["n_lat"], a["lat_max"], a["n_long"], a["long_max"]) == (61, 0.75, 61, 15.0)
    assert np.allclose(a["lateral_m"], spec.lateral) and np.allclose(a["longitudinal_m"], spec.longitudinal)
    table = np.array([[c == "1" for c in row] for row in pj["mask"]["table"]])
    assert np.array_equal(table, spec.mask) and pj["mask"]["masked_value"] == -1e9
    assert pj["mask"]["half_widths"][:8] == [0, 0, 2, 4, 8, 13, 20, 29]
    assert np.array_equal(load_exported(package).feasibility(), spec.mask)
    # normalisation baked in, with the running statistics that the network holds
    norm = pj["normalisation"]
    assert norm["inside_model"] is True and norm["images"]["mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert np.allclose(norm["vectors"]["ego"]["mean"], net.norms["ego"].mean.numpy())
    assert np.allclose(norm["vectors"]["limits"]["mean"], net.norms["limits"].mean.numpy())
    # versions, configs, provenance
    v = pj["versions"]
    assert v["torch"] == torch.__version__ and v["onnx_opset"] == pj["onnx"]["opset"] == 17 and v["onnx"]
    # the mode is recorded (the env config's own, filled in when the training config left it to the default)
    assert pj["observation_mode"] == "camera" and load_exported(package).observation_mode == "camera"
    assert pj["policy_config"]["embed_dim"] == 32 and pj["env_config"] == {**ENV, "observation": "camera"}
    assert pj["env_config_resolved"]["resolution"] == [32, 16]
    src = pj["source"]
    manifest = store / RUN / "ckpt-00000001" / "MANIFEST.json"
    assert src["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert (src["run"], src["version"], src["store_uri"]) == (RUN, 1, str(store))
    assert src["meta"]["iteration"] == 3 and src["train_state"]["stage"] == "rl"
    assert pj["rig"]["name"] == "front3" and len(pj["rig"]["cameras"]) == 3
    assert pj["exported_at"].endswith("+00:00") and pj["export_seconds"]["total"] > 0
    for name, entry in pj["files"].items():
        data = (package / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_policy_json_round_trips(package, ckpt, recorded):
    space, spec, _ = recorded
    _, net, _ = ckpt
    src = resolve_policy_source(package)
    assert src.kind == "exported" and src.policy_json["format"] == "splatdrive-policy"
    assert src.action_spec == spec
    assert space_to_json(src.obs_space) == space_to_json(space)
    assert all(src.obs_space[k].shape == space[k].shape and src.obs_space[k].dtype == space[k].dtype for k in space)
    want = net.state_dict()
    assert set(src.weights) == set(want) and all(torch.equal(src.weights[k], want[k]) for k in want)
    assert src.provenance["manifest_sha256"] == src.policy_json["source"]["manifest_sha256"]
    assert space_from_json(space_to_json(space), "x") == space
    src.check_observation_space(space)


def test_parity_onnx_and_torch_export_on_random_and_recorded_observations(package, ckpt, recorded):
    space, _, real = recorded
    eager = resolve_policy_source(f"{ckpt[0]}/{RUN}@1").make_actor()
    batches = [_random(space, 64, 1), _random(space, 1, 2), real]
    figures = {}
    for backend in ("onnxruntime", "torch"):
        pol = load_exported(package, backend=backend)
        worst = 0.0
        for obs in batches:
            a, b = eager.run(obs), pol.run(obs)
            feas = a["logits_lat_all"] > -1e8
            assert np.array_equal(feas, b["logits_lat_all"] > -1e8)
            for key in ("logits_long", "values"):
                worst = max(worst, float(np.abs(a[key] - b[key]).max()))
            worst = max(worst, float(np.abs(a["logits_lat_all"] - b["logits_lat_all"])[feas].max()))
            assert np.array_equal(a["action"], b["action"]), backend
            assert np.array_equal(pol.act(obs), a["action"]) and pol.act(obs).dtype == np.int64
        assert worst <= 1e-4, (backend, worst)
        figures[backend] = worst
    print(f"max |logit or value diff| vs eager: {figures}")
    # the policy really depends on the real observations (not a constant action)
    assert len({tuple(r) for r in eager(batches[0])}) > 1


def test_exported_and_checkpoint_actors_drive_alike(package, ckpt, recorded):
    """What evaluation relies on: a checkpoint and its export choose the same actions."""
    space, _, real = recorded
    from_ckpt = resolve_policy_source(f"{ckpt[0]}/{RUN}").make_actor()
    exported = resolve_policy_source(package)
    obs = _random(space, 16, 5)
    for actor in (exported.make_actor(), exported.make_actor("torch"), exported.make_actor("eager")):
        assert np.array_equal(actor(obs), from_ckpt(obs)) and np.array_equal(actor(real), from_ckpt(real))
    lat_m, long_m = load_exported(package).decode(from_ckpt(real))
    assert lat_m.shape == long_m.shape == (6,) and np.all(np.abs(lat_m) <= 0.75) and np.all(long_m >= 0)


def test_reexport_copies_with_check(package, tmp_path):
    from policy.export import export_policy

    res = export_policy(package, tmp_path / "again", check_samples=4)
    for name in ("policy.json", "policy.onnx", "policy.pt2", "weights.safetensors"):
        assert (tmp_path / "again" / name).read_bytes() == (package / name).read_bytes()
    assert res.policy_json["source"]["run"] == RUN
    with pytest.raises(ExportError, match="not empty"):
        export_policy(package, tmp_path / "again", check_samples=4)


# -- the resolver ----------------------------------------------------------------------------------


def test_source_syntax(ckpt, tmp_path):
    store = ckpt[0]
    s = parse_source(f"{store}/{RUN}@7")
    assert (s.kind, s.store, s.run, s.version) == ("store", str(store), RUN, 7)
    assert parse_source(f"{store}/{RUN}@latest").version is None
    assert parse_source(f"{store}/{RUN}").version is None  # an existing run folder: its newest version
    c = parse_source(f"{store}/{RUN}/ckpt-00000001")
    assert (c.kind, c.run, c.version, Path(c.store)) == ("checkpoint_dir", RUN, 1, store.resolve())
    s3 = parse_source("s3://bucket/some/prefix/myrun@3?endpoint_override=127.0.0.1:9000&secret_key=abc")
    assert (s3.store, s3.run, s3.version) == (
        "s3://bucket/some/prefix?endpoint_override=127.0.0.1:9000&secret_key=abc",
        "myrun",
        3,
    )
    assert "abc" not in redact_uri(s3.text) and "secret_key=***" in redact_uri(s3.text)
    tree = {"out": s3.text, "policies": ("runs/a@3", s3.text), "n": 3, "nested": {"x": [None, "a?b=1"]}}
    shown = "s3://bucket/some/prefix/myrun@3?endpoint_override=127.0.0.1:9000&secret_key=***"
    assert redact_tree(tree) == {
        "out": shown,
        "policies": ("runs/a@3", shown),
        "n": 3,
        "nested": {"x": [None, "a?b=1"]},
    }
    for bad, what in (
        (f"{store}/{RUN}@x", "neither an int"),
        (f"{store}/{RUN}@0", "neither an int"),
        (f"{store}/{RUN}/ckpt-00000009", "does not exist"),
        ("nowhere", "store part is missing"),
        (f"{tmp_path}/missing/run", "no such folder"),
        ("", "empty"),
        (str(tmp_path), "not a run folder"),
    ):
        with pytest.raises(PolicySourceError, match=what):
            parse_source(bad)


def test_every_checkpoint_form_resolves_to_the_same_policy(ckpt):
    store, net, _ = ckpt
    forms = [f"{store}/{RUN}@1", f"{store}/{RUN}@latest", f"{store}/{RUN}", f"file://{store}/{RUN}@1"]
    forms.append(str(store / RUN / "ckpt-00000001"))
    sources = [resolve_policy_source(f) for f in forms]
    shas = {s.provenance["manifest_sha256"] for s in sources}
    assert len(shas) == 1 and all(s.kind == "checkpoint" and s.provenance["version"] == 1 for s in sources)
    for s in sources:
        assert all(torch.equal(s.weights[k], v) for k, v in net.state_dict().items())
        assert (
            s.env_config == {**ENV, "observation": "camera"} and s.policy_config == POLICY and s.rig["name"] == "front3"
        )
    with pytest.raises(PolicySourceError, match="eager"):
        sources[0].make_actor("onnxruntime")


def test_observation_space_rebuilt_from_config_without_obs_space_json(tmp_path, suite, recorded, ckpt):
    """Older checkpoints: the space comes from config.json's env (rig from the suite's first scenario)."""
    space, spec, _ = recorded
    net = ckpt[1]
    env = {**ENV, "observation": "camera"}
    config = {"run": "old", "store": str(tmp_path), "suite": str(suite), "env": env, "policy": dict(POLICY)}
    _commit(tmp_path, net, config)
    src = resolve_policy_source(f"{tmp_path}/old@1")
    assert space_to_json(src.obs_space) == space_to_json(space) and src.action_spec == spec
    assert src.observation_mode == "camera"
    # from before the observation modes (no mode in the env config, no obs_space.json): privileged
    from envs.driving import DrivingEnv

    penv = DrivingEnv({**ENV, "observation": "privileged", "render_backend": "cpu"}, scenarios=str(suite))
    pspace = penv.observation_space
    penv.close()
    pnet = _trained_like(pspace, spec, _random(pspace, 4, 0))
    _commit(tmp_path, pnet, {**config, "run": "legacy", "env": dict(ENV)})
    legacy = resolve_policy_source(f"{tmp_path}/legacy")
    assert legacy.observation_mode == "privileged" and legacy.env_config["observation"] == "privileged"
    assert space_to_json(legacy.obs_space) == space_to_json(pspace)

    assert src.rig == {"name": "front3", "width": 32, "height": 16}
    # rig and resolution in the env config: no scenario needed
    gone = {**config, "run": "pinned", "suite": str(tmp_path / "gone"), "env": {**env, "rig": "front3"}}
    _commit(tmp_path, net, gone)
    assert space_to_json(resolve_policy_source(f"{tmp_path}/pinned").obs_space) == space_to_json(space)
    # left to a suite that is not there: a clear error
    _commit(tmp_path, net, {**config, "run": "lost", "suite": str(tmp_path / "gone")})
    with pytest.raises(PolicySourceError, match=r"env.rig/env.resolution .* training suite cannot be read"):
        resolve_policy_source(f"{tmp_path}/lost")
    # obs_space.json without a rig: the rig's name from the suite, its resolution from the space
    _commit(tmp_path, net, {**config, "run": "norig"}, observation_space=space, action_spec=spec)
    assert resolve_policy_source(f"{tmp_path}/norig").rig == {"name": "front3", "width": 32, "height": 16}
    # weights that do not fit the space of the config (another camera resolution): refused, named
    _commit(tmp_path, net, {**config, "run": "wrong", "env": {"resolution": [64, 32], "observation": "camera"}})
    with pytest.raises(PolicySourceError, match=r"policy.safetensors: the weights do not fit"):
        resolve_policy_source(f"{tmp_path}/wrong")


# -- refusals --------------------------------------------------------------------------------------


def _copy_store(store: Path, dst: Path) -> Path:
    shutil.copytree(store, dst)
    return dst


def _flip(path: Path, at: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_corrupt_or_missing_checkpoint_is_refused_before_anything_is_written(ckpt, tmp_path, capsys):
    from policy.export import main

    store = _copy_store(ckpt[0], tmp_path / "store")
    version = store / RUN / "ckpt-00000001"
    out = tmp_path / "out"

    _flip(version / "policy.safetensors")
    for spec in (f"{store}/{RUN}@1", str(version)):
        with pytest.raises(PolicySourceError, match=r"policy.safetensors' has sha256 .* \(changed bytes\)"):
            resolve_policy_source(spec)
    assert main(["--policy", f"{store}/{RUN}@latest", "--out", str(out)]) == 1
    assert "policy.safetensors" in capsys.readouterr().err and not out.exists()
    assert not list(tmp_path.glob(".tmp-*"))

    cfg = version / "config.json"
    cfg.write_bytes(cfg.read_bytes()[:-5])
    shutil.copyfile(ckpt[0] / RUN / "ckpt-00000001" / "policy.safetensors", version / "policy.safetensors")
    with pytest.raises(PolicySourceError, match=r"config.json' has \d+ bytes, the manifest says \d+ \(truncated\?\)"):
        resolve_policy_source(f"{store}/{RUN}@1")

    (version / "MANIFEST.json").unlink()
    with pytest.raises(PolicySourceError, match=r"MANIFEST.json is missing"):
        resolve_policy_source(str(version))
    with pytest.raises(PolicySourceError, match="has no committed checkpoint"):
        resolve_policy_source(f"{store}/{RUN}@latest")
    with pytest.raises(PolicySourceError, match=r"no committed version 2\b.*committed versions: none"):
        resolve_policy_source(f"{store}/{RUN}@2")
    with pytest.raises(PolicySourceError, match="has no committed checkpoint"):
        resolve_policy_source(f"{store}/nosuchrun@latest")
    assert main(["--policy", str(version), "--out", str(out)]) == 1 and not out.exists()


def test_corrupt_package_is_refused(package, tmp_path):
    pkg = shutil.copytree(package, tmp_path / "pkg")
    _flip(pkg / "policy.onnx", 1000)
    with pytest.raises(ExportError, match=r"policy.onnx has sha256 .* \(changed bytes\)"):
        load_exported(pkg)
    with pytest.raises(PolicySourceError, match=r"policy\.onnx"):
        resolve_policy_source(pkg)
    load_exported(pkg, backend="torch")  # the other model is intact
    (pkg / "policy.pt2").write_bytes((package / "policy.pt2").read_bytes()[:-10])
    with pytest.raises(ExportError, match=r"policy.pt2 has \d+ bytes, policy.json says \d+ \(truncated\?\)"):
        load_exported(pkg, backend="torch")
    (pkg / "policy.json").unlink()
    with pytest.raises(ExportError, match=r"policy\.json is missing"):
        load_exported(pkg)


def test_pickled_torch_export_archive_is_refused(tmp_path, recorded):
    """torch.export.save keeps sample inputs pickled unless dropped; such an archive is not loaded."""
    from policy.network import ExportPolicy

    space, spec, _ = recorded
    net = ActorCritic(space, spec, from_dict(PolicyConfig, dict(POLICY))).eval()
    obs = random_obs(space, 2)
    ep = torch.export.export(ExportPolicy(net), (obs,))
    torch.export.save(ep, str(tmp_path / "p.pt2"))
    with pytest.raises(ExportError, match="pickled payload"):
        check_pt2_archive(tmp_path / "p.pt2")


def test_observations_that_do_not_match_the_spec_are_refused(package, recorded):
    space, _, real = recorded
    pol = load_exported(package)
    obs = dict(real)
    cases = [
        ({k: v for k, v in obs.items() if k != "ego"}, r"missing \['ego'\]"),
        ({**obs, "lidar": obs["ego"]}, r"unexpected \['lidar'\]"),
        ({**obs, "cameras": obs["cameras"].astype(np.float32)}, r"'cameras' has dtype float32, expected uint8"),
        ({**obs, "ego": obs["ego"][:, :3]}, r"'ego' has shape \(6, 3\), expected \[B, 4\]"),
        ({**obs, "navigation": obs["navigation"][:3]}, r"'navigation' has batch size 3, 'cameras' has 6"),
        (
            {**obs, "cameras": obs["cameras"][:, :, :8]},
            r"'cameras' has shape \(6, 3, 8, 32, 3\), expected \[B, 3, 16, 32, 3\]",
        ),
    ]
    for bad, msg in cases:
        with pytest.raises(ObservationMismatch, match=msg):
            pol.act(bad)
    import gymnasium as gym

    no_cams = gym.spaces.Dict({k: v for k, v in space.spaces.items() if k != "cameras"})
    with pytest.raises(PolicySourceError, match=r"cameras: policy \(\(3, 16, 32, 3\), 'uint8'\), the env absent"):
        resolve_policy_source(package).check_observation_space(no_cams)


def test_policy_exported_runs_without_the_training_code(package, recorded):
    _, _, real = recorded
    np.savez(package.parent / "obs.npz", **real)
    want = load_exported(package).act(real)
    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import policy.exported
        from policy import load_exported
        heavy = ("envs", "learner", "sim", "scenarios", "rollout", "policy.network", "policy.sources")
        heavy += ("torch", "gymnasium")
        loaded = [m for m in heavy if m in sys.modules]
        assert not loaded, loaded
        pol = load_exported({str(package)!r})
        obs = dict(np.load({str(package.parent / "obs.npz")!r}))
        print(pol.act(obs).tolist())
        loaded = [m for m in heavy if m in sys.modules]
        assert not loaded, loaded
        """
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == want.tolist()


def test_cli_help_and_usage(capsys):
    from policy.export import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--policy" in text and "--out" in text and "opset" in text and "<store>/<run>" in text
    assert main([]) == 2
    with pytest.raises(SystemExit) as e:
        main(["--policy", "x", "--out", "y", "nosuchkey=1"])
    assert e.value.code == 2


def test_a_policy_refuses_an_env_of_the_other_observation_mode(package, ckpt, suite):
    """The package and the checkpoint record their mode (camera); an env or an evaluation in privileged
    mode is refused with what to set, before anything runs."""
    from envs.driving import DrivingEnv
    from evaluation.evaluate import PolicyError, resolve_policies

    store, _, _ = ckpt
    pol = load_exported(package)
    priv = DrivingEnv({**ENV, "observation": "privileged", "render_backend": "cpu"}, scenarios=str(suite))
    cam = DrivingEnv({**ENV, "render_backend": "cpu"}, scenarios=str(suite))
    pol.check_env(cam)  # the same mode: fine
    with pytest.raises(
        ExportError, match=r"trained with observation='camera', the env DrivingEnv observes 'privileged'"
    ):
        pol.check_env(priv)
    for src in (resolve_policy_source(package), resolve_policy_source(f"{store}/{RUN}")):
        assert src.observation_mode == "camera"
        src.check_observation_mode("camera")
        with pytest.raises(PolicySourceError, match=r"observation='camera'.*set env.observation=camera"):
            src.check_observation_mode("privileged")
    scenarios = priv.pool.scenarios
    with pytest.raises(PolicyError, match=r"trained with observation='camera', the suite's env observes 'privileged'"):
        resolve_policies([str(package)], scenarios, {"observation": "privileged"})
    # baselines read ground truth: the evaluation gives them the privileged observation explicitly
    (base,) = resolve_policies(["lane-follow"], scenarios, {})
    assert base.env["observation"] == "privileged" and base.env["map"] and not base.env["cameras"]


def test_inputs_describe_the_ego_features_by_mode():
    """policy.json's inputs name the ego's features: camera [4], privileged [6] (no elapsed time), and a
    privileged ego of 7 (spaces from before the elapsed fraction was dropped) with it at the end."""

    def described(space):
        return {e["name"]: e for e in space_to_json(space, describe=True)}

    cam = described(example_observation_space(3, 16, 32, parts=CAMERA_PARTS))
    assert cam["ego"]["features"] == ["speed", "yaw_rate", "accel", "steer"] and "route" not in cam
    priv = described(example_observation_space(3, 16, 32))
    assert priv["ego"]["features"] == ["speed", "yaw_rate", "accel", "steer", "last_lateral", "last_longitudinal"]
    assert "centre lines of the route's lanes" in priv["route"]["meaning"] and "limits" in priv
    old = gym.spaces.Dict({"ego": gym.spaces.Box(-np.inf, np.inf, (7,), np.float32)})
    assert described(old)["ego"]["features"][-1] == "elapsed"


# -- a lifted-BEV camera student ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backbone", "align_s", "dilation"), [("small", 0.0, (1, 1)), ("deep", 0.0, (1, 1)), ("small", 0.1, (2, 3))]
)
def test_a_lift_student_with_frame_history_exports_with_parity_and_runs_without_the_codebase(
    suite, tmp_path, backbone, align_s, dilation
):
    """The camera student the study distils (camera_encoder=lift over two frames, env.camera_history=1),
    with either image backbone, and with the earlier frame aligned by the ego's motion (lift_align_s: its
    projections computed per sample in the graph) and a dilated grid CNN (lift_bev_dilation): ONNX (grid_sample
    at the rig's projections) and torch.export agree with the eager network, and the package drives from numpy
    alone."""
    from envs.driving import DrivingEnv
    from policy.export import main

    env_cfg = {**ENV, "camera_history": 1}
    env = DrivingEnv({**env_cfg, "render_backend": "cpu"}, scenarios=str(suite))
    obs, _ = env.reset(seed=0)
    frames = [obs]
    for k in range(3):
        obs, *_ = env.step(np.array([30 + k, 20]))
        frames.append(obs)
    space, spec, scenarios = env.observation_space, env.action_spec, env.pool.scenarios
    env.close()
    assert space["cameras"].shape == (6, 16, 32, 3)  # the rig's 3 cameras now and one step ago
    real = {key: np.stack([f[key] for f in frames]) for key in space.spaces}
    lift = {**POLICY, "camera_encoder": "lift", "bev_cells": 8, "bev_range_m": 20.0, "lift_channels": 4}
    lift.update(bev_channels=4, lift_backbone=backbone, lift_align_s=align_s, lift_bev_dilation=dilation)
    torch.manual_seed(3)
    net = ActorCritic(space, spec, from_dict(PolicyConfig, lift))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.2 * torch.randn_like(p))
    net.update_obs_stats({k: torch.from_numpy(v) for k, v in real.items()})
    net.eval()
    config = {"run": "lifted", "store": str(tmp_path), "suite": str(suite), "env": env_cfg, "policy": lift}
    _commit(tmp_path, net, config, observation_space=space, action_spec=spec, rig=("front3", 32, 16))
    out = tmp_path / "pkg"
    assert main(["--policy", f"{tmp_path}/lifted@latest", "--out", str(out), "check_samples=8"]) == 0
    assert json.loads((out / "policy.json").read_text())["policy_config"]["camera_encoder"] == "lift"
    eager = resolve_policy_source(f"{tmp_path}/lifted@1").make_actor()
    for backend in ("onnxruntime", "torch"):
        pol = load_exported(out, backend=backend)
        for batch in (_random(space, 16, 4), real):
            a, b = eager.run(batch), pol.run(batch)
            assert float(np.abs(a["logits_long"] - b["logits_long"]).max()) <= 1e-4, backend
            assert float(np.abs(a["values"] - b["values"]).max()) <= 1e-4, backend
            assert np.array_equal(a["action"], b["action"]), backend
    # an evaluation of the checkpoint and of the package sets up the env with its frames (camera_history is one
    # of the settings a policy brings), so the suite's env needs no overrides to fit it
    from evaluation.evaluate import resolve_policies

    for spec in (f"{tmp_path}/lifted@latest", str(out)):
        (entry,) = resolve_policies([spec], scenarios, {})
        assert entry.env["camera_history"] == 1, spec
    # the lift reads the images: other frames, other logits
    other = {**real, "cameras": real["cameras"][::-1].copy()}
    assert not np.allclose(eager.run(real)["logits_long"], eager.run(other)["logits_long"])
    np.savez(tmp_path / "obs.npz", **real)
    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        from policy import load_exported
        pol = load_exported({str(out)!r})
        print(pol.act(dict(np.load({str(tmp_path / "obs.npz")!r}))).tolist())
        loaded = [m for m in ("torch", "envs", "learner", "policy.network", "policy.lift") if m in sys.modules]
        assert not loaded, loaded
        """
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == load_exported(out).act(real).tolist()
