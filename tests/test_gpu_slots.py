"""One GPU per job: a job claims the first GPU no other job holds, and a killed job's GPU is
free again (the lock dies with its process)."""

import subprocess
import sys

import torch

from fednorm import gpu_slots
from fednorm.gpu_slots import claimed_gpu
from fednorm.run import job_device


def test_claims_take_the_first_free_gpu_and_release_it_at_the_end(tmp_path):
    with claimed_gpu(3, tmp_path) as first:
        with claimed_gpu(3, tmp_path) as second, claimed_gpu(3, tmp_path) as third:
            with claimed_gpu(3, tmp_path) as fourth:
                assert (first, second, third, fourth) == (0, 1, 2, None)
        with claimed_gpu(3, tmp_path) as again:
            assert again == 1  # 0 is still held, 1 and 2 were released
    with claimed_gpu(3, tmp_path) as after:
        assert after == 0


def test_a_killed_job_frees_its_gpu(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from fednorm.gpu_slots import claimed_gpu\n"
         "with claimed_gpu(2, Path(sys.argv[1])) as i:\n"
         "    print(i, flush=True); time.sleep(120)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "0"
        with claimed_gpu(2, tmp_path) as index:
            assert index == 1
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with claimed_gpu(2, tmp_path) as index:
        assert index == 0


def test_job_device_claims_only_among_several_unindexed_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots, "LOCK_DIR", tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    with job_device("auto") as a, job_device("cuda") as b, job_device("cuda:3") as c:
        assert (a, b, c) == (torch.device("cuda", 0), torch.device("cuda", 1),
                             torch.device("cuda", 3))
    with job_device("cpu") as cpu:
        assert cpu == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # e.g. one GPU under SLURM
    with job_device("auto") as only, job_device("auto") as same:
        assert only == same == torch.device("cuda")


def test_several_jobs_a_gpu_spread_over_the_gpus_before_sharing_one(tmp_path):
    """execution.jobs_per_gpu = 2 on 2 GPUs: four slots, every GPU's first slot first; a fifth
    job finds none free; a released slot is taken again."""
    with claimed_gpu(2, tmp_path, per_gpu=2) as a, claimed_gpu(2, tmp_path, per_gpu=2) as b:
        with claimed_gpu(2, tmp_path, per_gpu=2) as c:
            with claimed_gpu(2, tmp_path, per_gpu=2) as d:
                with claimed_gpu(2, tmp_path, per_gpu=2) as e:
                    assert (a, b, c, d, e) == (0, 1, 0, 1, None)
        with claimed_gpu(2, tmp_path, per_gpu=2) as again:
            assert again == 0  # GPU 0's second slot, released by c
    with claimed_gpu(2, tmp_path, per_gpu=1) as first:
        assert first == 0  # one job a GPU: slot 0 of each GPU, as before


def test_job_device_shares_a_gpu_among_jobs_per_gpu_jobs(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots, "LOCK_DIR", tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with job_device("cuda", 2) as a, job_device("cuda", 2) as b, job_device("cuda", 2) as c:
        assert (a, b, c) == (torch.device("cuda", 0), torch.device("cuda", 1),
                             torch.device("cuda", 0))
