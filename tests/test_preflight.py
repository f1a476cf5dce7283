"""What a plan needs from the machine (fednorm.preflight): one line per missing dataset, naming
it and where to put it; a dataset the pipeline downloads does not block; the paper profile's
dry run lists its scale and each missing dataset."""

from __future__ import annotations

import pytest

from fednorm.preflight import before_first_job, device_missing, missing
from tests.dag import ROOT, snakemake


def test_each_missing_dataset_is_one_line_naming_it_and_where(tmp_path):
    found = missing({"cifar10": set(), "imagenet": set(), "tinyimagenet": set(),
                     "digits5": {"svhn", "usps"}}, tmp_path)
    lines = [m.line for m in found]
    assert [line.split(":")[0] for line in lines] == [
        "CIFAR-10", "Digits-Five", "ImageNet-1K", "Tiny-ImageNet"]
    assert all("\n" not in line and str(tmp_path) in line for line in lines)
    # svhn's two .mat files and usps's two archives: the first named, the others counted
    assert "SVHN/train_32x32.mat and 3 more files" in lines[1]
    assert {m.line.split(":")[0]: m.blocks for m in found} == {
        "CIFAR-10": False, "Digits-Five": True, "ImageNet-1K": True, "Tiny-ImageNet": False}


def test_data_in_place_is_not_reported(tmp_path):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"")
    (tmp_path / "imagenet" / "train").mkdir(parents=True)
    (tmp_path / "imagenet" / "val").mkdir()
    assert missing({"cifar10": set(), "imagenet": set(), "mnist5k": set()}, tmp_path) == []
    (tmp_path / "imagenet" / "val").rmdir()
    assert [m.line[:11] for m in missing({"imagenet": set()}, tmp_path)] == ["ImageNet-1K"]


def test_a_cpu_plan_asks_for_no_device():
    assert device_missing("cpu", wants_gpu=True) is None
    assert device_missing("auto", wants_gpu=False) is None


def test_a_blocking_line_stops_before_the_first_job(tmp_path, capsys):
    class Plan:  # the two fields before_first_job reads
        class execution:
            device, gpus_per_job = "cpu", 0

    (block,) = missing({"imagenet": set()}, tmp_path)
    with pytest.raises(SystemExit) as stop:
        before_first_job(Plan, [block], local=True)
    assert stop.value.code == 2
    assert "1 missing" in capsys.readouterr().err
    (note,) = missing({"cifar10": set()}, tmp_path)
    before_first_job(Plan, [note], local=True)  # downloads itself: the run goes on


@pytest.mark.slow
def test_the_paper_profile_dry_run_lists_its_scale_and_each_missing_dataset(tmp_path):
    """From a folder with no data: the paper profile's dry run succeeds, plans the paper's
    results folder, and names every dataset of the paper scale once."""
    out = snakemake("--profile", "workflow/profiles/paper", "--dry-run", "--quiet", "rules",
                    "--config", "paths={'data': '%s'}" % (tmp_path / "data"), cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    said = [line for line in out.stderr.splitlines() if line.startswith("fednorm: missing:")]
    assert [line.split(":")[2].strip() for line in said] == [
        "CIFAR-10", "Digits-Five", "ImageNet-1K", "Tiny-ImageNet"]
    assert "train_" in out.stdout


@pytest.mark.slow
def test_a_bare_snakemake_plans_the_quick_profile_with_the_default_profile():
    """No --configfile, no --profile: config/quick.yaml over config/config.yaml, and
    Snakemake's default workflow profile (profiles/default: keep-going) read by itself."""
    out = snakemake("--dry-run", "--cores", "1", cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "workflow specific profile profiles/default" in out.stderr
    assert "results/quick/" in out.stdout and "results/runs/" not in out.stdout
    assert "fednorm: missing" not in out.stderr  # the quick profile's digits are installed
