"""`fednorm run CONFIG --out DIR`: one run without Snakemake, reproducible to the bit on CPU."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dag import ROOT, env_without_torch

from fednorm.cli import main
from fednorm.inputs import InputError
from fednorm.metrics import DOMAIN_ACCURACY

TINY = {"dataset": "synthetic", "n_train": 200, "n_test": 100, "image_size": 8, "width": 4,
        "hidden": 8, "batch_size": 4, "n_clients": 4, "steps": 6, "lr": [0.05],
        "lr_milestones": [], "eval_every": 3, "heterogeneity": 0.0}


def test_run_writes_metrics_and_metadata_bit_identically(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(TINY))
    for out in ("a", "b"):
        assert main(["run", str(config), "--out", str(tmp_path / out), "--device", "cpu",
                     "--threads", "1"]) == 0
    first, second = ((tmp_path / o / "metrics.csv").read_bytes() for o in ("a", "b"))
    assert first == second
    assert first.decode().splitlines()[0] == (
        "step,test_accuracy,test_loss,train_loss,norm_error_mean,norm_error_var,stat_change,"
        "stat_deviation,stat_variance,comm_rounds,local_test_accuracy,val_accuracy,"
        "domain_accuracy,worst_domain_accuracy," + ",".join(DOMAIN_ACCURACY))
    meta = json.loads((tmp_path / "a" / "run.json").read_text())
    assert meta["status"] == "ok" and meta["config"]["steps"] == 6 and meta["device"] == "cpu"
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["dynamics.csv", "metrics.csv", "norm_error.csv", "run.json"]


def test_run_rejects_a_bad_config_naming_the_key(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**TINY, "normalizer": "batchnorm"}))
    assert main(["run", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "key 'normalizer' has value 'batchnorm'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_download_offline_prints_its_message_alone(tmp_path, capsys, monkeypatch):
    """Offline, `fednorm download-cifar10` exits 1 with the message that says what to do, and
    no traceback (the download itself is made to fail as it does without network)."""
    import urllib.error

    import torchvision

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torchvision.datasets.CIFAR10, "download", offline)
    assert main(["download-cifar10", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fednorm: CIFAR-10 is not available in ")
    assert "fednorm download-cifar10 --root" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_plan_checks_the_claims_file_too(tmp_path, capsys, monkeypatch):
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    assert main(["plan", "config/config.yaml"]) == 0
    out = capsys.readouterr().out
    assert "44 claims numeric in config/claims.yaml (fbn 12, fixbn 32)" in out
    assert ("65 claims in words in config/claims.yaml (fbn 19, fixbn 33, fedtan 3, hybridbn 3, "
            "fedbn 1, fedwon 3, fedap 1, fedfn 2)") in out
    bad = tmp_path / "claims.yaml"
    bad.write_text(yaml.safe_dump({"claims": [{"id": "c", "paper": "fbn", "source": "Fig 3a",
                                               "setting": {"normalizer": "fedprox"}, "value": 1}]}))
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump({"claims": str(bad)}))
    assert main(["plan", "config/config.yaml", str(override)]) == 2
    assert "claim 'c', setting: key 'normalizer' has value 'fedprox'" in capsys.readouterr().err


def _one_line(err: str) -> str:
    """The single line a user error prints (and nothing else: no traceback)."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_the_issues_four_tracebacks_are_one_line_each(tmp_path, capsys):
    """Issue 25: a YAML syntax error, a config path that does not exist (run and plan alike)
    and an output folder that cannot be created: one line naming the path, exit 2, and the
    run is not trained (nothing is written)."""
    good = tmp_path / "run.yaml"
    good.write_text(yaml.safe_dump(TINY))
    broken = tmp_path / "broken.yaml"
    broken.write_text("steps: 6\nlr: [0.05\nseed: 0\n")
    (tmp_path / "blocker").write_text("")
    out = str(tmp_path / "out")
    cases = [
        (["run", str(broken), "--out", out], f"config file {broken}: not valid YAML: line 3, "
                                             "column 5: "),
        (["run", str(tmp_path / "nope.yaml"), "--out", out], f"config file "
                                                             f"{tmp_path / 'nope.yaml'}: no such"),
        (["plan", str(tmp_path / "nope.yaml")], f"config file {tmp_path / 'nope.yaml'}: no such"),
        (["run", str(good), "--out", str(tmp_path / "blocker" / "out")],
         f"--out {tmp_path / 'blocker' / 'out'}: cannot create this folder: "),
    ]
    for argv, start in cases:
        assert main(argv) == 2, argv
        assert _one_line(capsys.readouterr().err).startswith("fednorm: " + start)
    assert not (tmp_path / "out").exists()


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        main(["plan", str(tmp_path / "nope.yaml"), "--debug"])


LONG = {**TINY, "steps": 600, "eval_every": 30}


def _start(config, out, *extra):
    """`fednorm run` in its own process, one thread, its log lines on stderr."""
    return subprocess.Popen(
        [sys.executable, "-m", "fednorm.cli", "run", str(config), "--out", str(out),
         "--device", "cpu", "--threads", "1", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())


def _without_timings(run_json: Path) -> dict:
    meta = json.loads(run_json.read_text())
    del meta["wall_time_s"]
    return meta


@pytest.mark.parametrize("kill", ["sigterm", "sigkill"])
def test_a_killed_run_resumes_from_its_directory_and_equals_one_never_stopped(kill, tmp_path):
    """SIGTERM: the run saves its state in DIR, exits 143 and says where; SIGKILL after an
    interval save (every 0.002 min): nothing said, the last save is there. The same command
    run again says "resumed at step N of 600" (N > 0), finishes, deletes DIR/resume.pt, and
    its metrics.csv and run.json (less the wall time) equal those of a run never stopped."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(LONG))
    out = tmp_path / "stopped"
    extra = ("--checkpoint-minutes", "0.002") if kill == "sigkill" else ()
    proc = _start(config, out, *extra)
    if kill == "sigterm":
        for line in proc.stderr:  # the first progress line: training is under way
            if "step 30/600" in line:
                break
        proc.send_signal(signal.SIGTERM)
    else:
        deadline = time.monotonic() + 120
        while not (out / "resume.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (128 + signal.SIGTERM if kill == "sigterm" else -signal.SIGKILL)
    if kill == "sigterm":
        assert "stopped by signal SIGTERM at step" in err
    assert (out / "resume.pt").exists() and not (out / "run.json").exists()
    resumed = _start(config, out)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    step = int(re.search(r"resumed at step (\d+) of 600", err).group(1))
    assert 0 <= step < 600
    assert not (out / "resume.pt").exists()
    assert main(["run", str(config), "--out", str(tmp_path / "whole"), "--device", "cpu",
                 "--threads", "1"]) == 0
    for name in ("metrics.csv", "norm_error.csv", "dynamics.csv"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert _without_timings(out / "run.json") == _without_timings(tmp_path / "whole" / "run.json")



def test_python_m_fednorm_plans_without_torch(tmp_path):
    """`python -m fednorm` is the command, and `plan` imports no PyTorch (a login node without
    it): a sitecustomize that makes `import torch` fail does not stop it."""
    env = env_without_torch(tmp_path)
    assert subprocess.run([sys.executable, "-m", "fednorm", "--help"], env=env, cwd=ROOT,
                          capture_output=True).returncode == 0
    blocked = subprocess.run([sys.executable, "-c", "import torch"], env=env,
                             capture_output=True, text=True)
    assert "No module named 'torch'" in blocked.stderr  # the shim works
    out = subprocess.run([sys.executable, "-m", "fednorm", "plan", "config/config.yaml",
                          ".test/config.yaml"], env=env, cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"^\d+ distinct training runs in \d+ jobs", out.stdout, re.M)
