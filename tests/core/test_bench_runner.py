"""`skyhub bench` / `python -m benchmarks`: finds every benchmark, knows what each needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import _runner  # noqa: E402


def test_every_benchmark_module_is_found_with_its_needs() -> None:
    found = _runner.benchmarks()
    modules = {p.stem for p in (ROOT / "benchmarks").glob("[a-z]*.py")}
    assert set(found) == modules and "eval_harness" in found
    assert found["trainer_gpu"] == ("cuda",) and found["sandbox_reset"] == ("docker",)
    assert found["sql_env"] == ()


def test_an_unmet_need_is_reported_not_run() -> None:
    assert _runner.missing(("no-such-thing",)) == ["no-such-thing"]
    assert _runner.missing(()) == []


def test_every_result_file_has_machine_info_and_a_known_benchmark() -> None:
    for path in (ROOT / "benchmarks" / "results").glob("*.json"):
        doc = json.loads(path.read_text())
        assert doc["benchmark"] == path.stem and path.stem in _runner.benchmarks()
        assert {"cpu", "cores", "python"} <= set(doc["machine"]) and doc["results"]


def test_bench_cli_lists_and_rejects_unknown_names(tmp_path: Path) -> None:
    skyhub = Path(sys.executable).parent / "skyhub"
    r = subprocess.run([str(skyhub), "bench", "--list"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env={"COLUMNS": "150", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "eval_harness" in r.stdout and "cuda" in r.stdout
    r = subprocess.run([str(skyhub), "bench", "nonsense"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "unknown benchmark" in r.stderr


@pytest.mark.parametrize("name", ["eval_harness"])
def test_benchmark_help_runs(name: str) -> None:
    r = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--concurrency" in r.stdout
