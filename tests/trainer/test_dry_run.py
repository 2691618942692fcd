"""`skyhub train --dry-run`: placement and per-device memory from the model's config alone,
refusals that say what to change, and an estimate that matches peaks measured on this CPU."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import torch

from skyhub.errors import UsageError
from skyhub.trainer.config import AlgoConfig, OptimConfig, load_config
from skyhub.trainer.learner import Learner
from skyhub.trainer.memory import parse_devices, placement
from skyhub.trainer.model_memory import (
    KNOWN,
    GiB,
    ModelShape,
    learner_estimate,
    measure_peak,
    tensor_bytes,
)
from skyhub.trainer.rollout import Trajectory
from skyhub.trainer.tiny import tiny_model


def cli(*args: str):
    from typer.testing import CliRunner

    from skyhub.cli.main import app

    return CliRunner().invoke(app, ["train", *args])


def test_the_653_recipe_fits_one_node_of_8x80gb_and_says_where_everything_goes():
    out = cli("--recipe", "sql-grpo-653", "--dry-run", "--devices", "8x80GB")
    assert out.exit_code == 0, out.output
    text = out.output
    assert "ranks 0-7, FSDP2 over 8 ranks" in text and "float32 masters" in text
    # SkyRL-SQL's run_skyrl_sql.sh: colocate_all, 2 engines x TP 4, utilisation 0.7
    assert "2 vLLM engines x tensor parallel 4, colocated with the learner" in text
    assert "engine 0 on GPUs 0-3, engine 1 on GPUs 4-7" in text
    assert "gpu_memory_utilization 0.7" in text and "sleep mode level 1" in text
    assert "fits: yes" in text
    assert "7.62B parameters" in text  # Qwen2.5-Coder-7B's shape, with no download
    plan = placement(load_config("sql-grpo-653"), parse_devices("8x80GB"))
    assert plan.fits and all(t <= 80 * GiB for t in plan.device_totals().values())
    # awake, an engine's 56 GiB share sits beside what a rank keeps between steps; asleep,
    # the learner has its peak: the share would not fit beside the peak
    rows = {r.phase: r.total for r in plan.rows if r.capacity is None}  # the GPUs'
    assert rows["generating"] == pytest.approx(plan.resident + 0.7 * 80 * GiB + 3 * GiB)
    assert rows["training"] == pytest.approx(plan.learner.total + 3 * GiB)
    assert plan.learner.total + 0.7 * 80 * GiB > 80 * GiB
    # sharding is what makes it fit: the masters and AdamW state of 7.6B parameters
    # (16 bytes each, ~114 GiB) cannot sit on one GPU
    assert plan.learner.parts["AdamW moments (float32)"] == pytest.approx(
        8 * plan.shape.params / 8)


@pytest.mark.parametrize(("overrides", "devices", "message"), [
    (["dist.learner_ranks=1", "dist.rollout_engines=1", "dist.rollout_tp=1"], "8x80GB",
     "dist.learner_ranks=8 (one per GPU)"),
    (["rollout.gpu_memory_utilization=0.05"], "8x80GB", "vLLM gets 4.0 GiB per GPU"),
    ([], "8x24GB", "GPUs 0-7 (generating) needs 34.0 GiB of 24"),
    (["rollout.gpu_memory_utilization=0.9"], "8x80GB",
     "a lower rollout.gpu_memory_utilization"),
    (["loop.mode=async"], "8x80GB", "loop.mode=sync (colocated engines then sleep"),
    (["dist.learner_ranks=16"], "8x80GB", "16 ranks on each node, which has 8 GPUs"),
])
def test_a_config_that_does_not_fit_is_refused_with_what_to_change(overrides, devices,
                                                                   message):
    with pytest.raises(UsageError, match="does not fit") as e:
        placement(load_config("sql-grpo-653", overrides), parse_devices(devices)).check()
    assert message in str(e.value)


def test_the_cli_refuses_with_exit_code_2():
    out = subprocess.run([sys.executable, "-m", "skyhub.cli.main", "train", "--recipe",
                          "sql-grpo-653", "--dry-run", "--devices", "8x24GB"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "fits: NO" in out.stdout and "does not fit" in out.stderr
    wrong = cli("--devices", "8x80GB")  # --devices belongs to --dry-run
    assert wrong.exit_code == 2 and "add --dry-run" in wrong.output


@pytest.mark.parametrize(("overrides", "message"), [
    (["dist.learner_ranks=3", "dist.nnodes=2"], "multiple of dist.nnodes"),
    (["dist.learner_ranks=0"], "positive multiple"),
    (["dist.nnodes=2", "dist.learner_ranks=2", "dist.node_rank=2"], "node_rank must be in 0..1"),
    (["dist.learner_ranks=2", "algo.advantage=gae"], "not sharded yet"),
])
def test_dist_settings_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(UsageError, match=message):
        load_config("tiny-cpu", overrides)


def test_bad_device_specs_say_how_to_write_them():
    assert parse_devices("4x24GB").count == 4 and parse_devices("1x141gb").memory == 141 * GiB
    assert parse_devices("cpu").kind == "cpu"
    for bad in ("eight", "0x80GB", "8x"):
        with pytest.raises(UsageError, match="COUNTxMEMORY"):
            parse_devices(bad)


def test_a_model_without_a_config_on_this_machine_is_named():
    with pytest.raises(UsageError, match=r"no config for model\.name_or_path='acme/llm-9b'"):
        placement(load_config("sql-grpo-653", ["model.name_or_path=acme/llm-9b"]),
                  parse_devices("8x80GB"))


@pytest.mark.parametrize("kwargs", [{}, {"tie_embeddings": False, "layers": 3}])
def test_parameter_counts_are_the_models_own(kwargs):
    model = tiny_model(500, **kwargs)
    assert ModelShape.from_config(model.config).params == sum(
        p.numel() for p in model.parameters())


def test_known_shapes_have_the_published_parameter_counts():
    params = {k: ModelShape(k, **v).params for k, v in KNOWN.items()}
    for name, published in {"qwen2.5-0.5b": 0.49e9, "qwen2.5-1.5b": 1.54e9,
                            "qwen2.5-7b": 7.62e9, "qwen2.5-14b": 14.7e9}.items():
        assert params[name] == pytest.approx(published, rel=0.01)


def batch(n: int, length: int, vocab: int) -> list[Trajectory]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        e = Trajectory(group=i // 4, task_id=str(i), reward=float(i % 2))
        e.add([rng.randrange(6, vocab) for _ in range(length // 4)], agent=False)
        k = length - length // 4
        e.add([rng.randrange(6, vocab) for _ in range(k)], agent=True, logprobs=[-5.0] * k,
              versions=[0] * k)
        out.append(e)
    return out


@pytest.mark.parametrize(("hidden", "layers", "vocab", "length", "checkpointing"), [
    (128, 2, 320, 256, False),
    (160, 2, 3000, 256, True),
])
def test_the_estimate_matches_the_peak_measured_on_cpu(hidden, layers, vocab, length,
                                                       checkpointing):
    from skyhub.trainer.policy import enable_checkpointing

    model = tiny_model(vocab, hidden_size=hidden, layers=layers)
    if checkpointing:
        enable_checkpointing(model)
    tokens = 2 * length
    learner = Learner(model, AlgoConfig(), OptimConfig(
        lr=1e-3, micro_batch_tokens=tokens, train_batch_size=2, mini_batch_size=2))
    episodes = batch(8, length, vocab)
    learner.train_step(episodes, 4)  # AdamW's moments exist from here on
    learner.opt.zero_grad(set_to_none=True)
    resident = tensor_bytes(learner.policy, learner.opt)
    _, peak = measure_peak(lambda: learner.train_step(episodes, 4))
    measured = resident + peak
    estimate = learner_estimate(ModelShape.from_config(model.config), compute_bytes=4,
                                tokens=tokens, width=length, checkpointing=checkpointing,
                                chunk=learner.policy.chunk).total
    assert 0.85 <= estimate / measured <= 1.25, (estimate / GiB, measured / GiB)


def test_the_gpu_benchmark_runs_its_tiny_smoke_mode_on_cpu_and_refuses_without_a_gpu(capsys):
    import torch.distributed as dist

    from benchmarks import trainer_gpu

    trainer_gpu.main(["--tiny", "--repeats", "1"])  # the learner step and the baseline
    out = capsys.readouterr().out
    assert "tiny: raw" in out and "RL step" in out and "estimate" in out
    assert not dist.is_initialized()  # its one-rank process group is gone again
    if torch.cuda.is_available():
        return
    with pytest.raises(SystemExit, match=r"measures the learner on a CUDA GPU.*--tiny"):
        trainer_gpu.main([])


def test_the_dry_run_plans_node_0s_host_memory_beside_the_gpus():
    out = cli("--recipe", "sql-grpo-653", "--dry-run", "--devices", "8x80GB",
              "--host-mem", "512GB")
    assert out.exit_code == 0, out.output
    assert "host memory per node, GiB (--host-mem 512GB):" in out.output
    plan = placement(load_config("sql-grpo-653"), parse_devices("8x80GB"), "512GB")
    host = next(r for r in plan.rows if r.gpus == "host RAM, node 0")
    parts = dict(host.parts)
    p = plan.shape.params
    # 7B: rank 0's float32 copy and the gathered state dict 4P each, two sleeping engines'
    # bf16 weights 2P each (~85 GiB of host memory in all), plus each process's runtime
    assert parts["rank 0's float32 copy"] == parts["gathered state dict"] == 4 * p
    assert parts["2 sleeping engines' weights"] == 2 * 2 * p
    assert 80 * GiB < host.total - parts["runtimes (16 processes)"] < 90 * GiB
    assert host.capacity == 512 * GiB


def test_a_plan_that_does_not_fit_the_stated_host_memory_is_refused_with_what_to_change():
    out = cli("--recipe", "sql-grpo-653", "--dry-run", "--devices", "8x80GB",
              "--host-mem", "100GB")
    assert out.exit_code == 2
    assert "host RAM, node 0 (training) needs" in out.output and "of 100" in out.output
    assert "dist.rollout_layout=split" in out.output
    # split: the engines never sleep, so their weights stay off the host; 100 GB then fits
    split = placement(load_config("sql-grpo-653", ["dist.rollout_layout=split",
                                                   "dist.learner_ranks=4",
                                                   "dist.rollout_engines=1"]),
                      parse_devices("8x80GB"), "100GB")
    host = next(r for r in split.rows if r.gpus == "host RAM, node 0")
    assert not any("sleeping" in k for k, _ in host.parts)
    assert host.total < 100 * GiB


def test_host_memory_defaults_to_this_machines_ram_or_a_stated_assumption():
    from skyhub.trainer.memory import Devices, parse_host_mem

    here, source = parse_host_mem(None, Devices("gpu", 8, 80 * GiB, local=True))
    assert source == "this machine's RAM" and here > 0
    assumed, source = parse_host_mem(None, parse_devices("8x80GB"))
    assert assumed == 2 * 8 * 80 * GiB and "--host-mem" in source
    with pytest.raises(UsageError, match="512GB"):
        parse_host_mem("lots")
    assert cli("--recipe", "tiny-cpu", "--host-mem", "8GB").exit_code == 2  # needs --dry-run
