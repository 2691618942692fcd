"""SWE-bench-format instances read from the published file formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyhub.envs.swe.instances import Instance, load_instances
from skyhub.errors import DataNotFound, UsageError

# one record as the Hugging Face release of SWE-bench Lite writes it (test lists as JSON text)
HF_RECORD = {
    "repo": "psf/requests", "instance_id": "psf__requests-2317",
    "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
    "patch": "diff --git a/requests/sessions.py b/requests/sessions.py\n--- a/requests/sessions.py"
             "\n+++ b/requests/sessions.py\n@@ -1 +1 @@\n-method = builtin_str(method)\n"
             "+method = to_native_string(method)\n",
    "test_patch": "diff --git a/test_requests.py b/test_requests.py\n",
    "problem_statement": "method = builtin_str(method) problem", "hints_text": "",
    "created_at": "2014-11-01T02:20:16Z", "version": "2.4",
    "FAIL_TO_PASS": '["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]',
    "PASS_TO_PASS": '["test_requests.py::RequestsTestCase::test_basic_building", '
                    '"test_requests.py::TestTimeout::test_stream_timeout"]',
    "environment_setup_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
}


def check(inst: Instance) -> None:
    assert inst.instance_id == "psf__requests-2317" and inst.version == "2.4"
    assert inst.fail_to_pass == ("test_requests.py::RequestsTestCase::"
                                 "test_HTTP_200_OK_GET_ALTERNATIVE",)
    assert len(inst.pass_to_pass) == 2 and inst.test_patch.startswith("diff --git")
    assert inst.extra == {"created_at": "2014-11-01T02:20:16Z"}


def test_json_jsonl_and_parquet_read_alike(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    listed = dict(HF_RECORD, FAIL_TO_PASS=json.loads(HF_RECORD["FAIL_TO_PASS"]),
                  PASS_TO_PASS=json.loads(HF_RECORD["PASS_TO_PASS"]))  # SWE-Gym's lists
    (tmp_path / "a.json").write_text(json.dumps([HF_RECORD]))
    (tmp_path / "b.jsonl").write_text(json.dumps(listed) + "\n\n")
    pq.write_table(pa.Table.from_pylist([listed]), tmp_path / "c.parquet")
    for name in ("a.json", "b.jsonl", "c.parquet"):
        [inst] = load_instances(tmp_path / name)
        check(inst)
    with pytest.raises(UsageError, match="appears twice"):
        load_instances(tmp_path)  # the directory: three files, one id
    (tmp_path / "b.jsonl").unlink()
    (tmp_path / "c.parquet").unlink()
    (tmp_path / "notes.txt").write_text("ignored")
    assert [i.instance_id for i in load_instances(tmp_path)] == ["psf__requests-2317"]


def test_bad_records_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs base_commit, FAIL_TO_PASS"):
        Instance.from_record({k: v for k, v in HF_RECORD.items()
                              if k not in ("base_commit", "FAIL_TO_PASS")})
    with pytest.raises(UsageError, match="FAIL_TO_PASS: expected a list"):
        Instance.from_record(dict(HF_RECORD, FAIL_TO_PASS="test_a, test_b"))
    with pytest.raises(DataNotFound, match="no SWE-bench instances"):
        load_instances(tmp_path / "missing.jsonl")
    with pytest.raises(DataNotFound, match="holds no"):
        load_instances(tmp_path)
