"""task.toml read as Harbor's TaskConfig reads it (schema 1.x): every field, its legacy
spellings, Harbor's resolution rules for verifiers and steps, and errors that say how to fix
the file. No Docker: these are files only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyhub.envs.harbor.task import load_task, load_tasks, resolve_env
from skyhub.errors import UsageError


def write_task(root: Path, toml: str = "", *, name: str = "t", instruction: str = "Do it.\n",
               files: dict[str, str] | None = None, test_sh: bool = True,
               dockerfile: bool = True) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "task.toml").write_text(toml)
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    if dockerfile:
        (d / "environment").mkdir()
        (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    if test_sh:
        (d / "tests").mkdir()
        (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    for rel, text in (files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def cfg_of(root: Path, toml: str = "", **kw: object) -> dict:
    return load_task(write_task(root, toml, **kw)).meta["config"]  # type: ignore[arg-type]


def refused(root: Path, toml: str, *fragments: str, **kw: object) -> str:
    with pytest.raises(UsageError) as e:
        load_task(write_task(root, toml, **kw))  # type: ignore[arg-type]
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))
    return str(e.value)


# ------------------------------------------------------------------------------ defaults
def test_an_empty_task_toml_gets_harbors_defaults(tmp_path: Path) -> None:
    t = load_task(write_task(tmp_path))
    cfg = t.meta["config"]
    json.dumps(cfg)  # a plain, JSON-able dict
    d = tmp_path / "t"
    assert (t.id, t.prompt, t.answer, t.meta["source"]) == ("t", "Do it.", None, "harbor")
    assert cfg["environment"] == {
        "docker_image": None, "build_dir": str(d / "environment"), "cpus": 1.0,
        "memory_mb": 2048, "storage_mb": None, "gpus": None, "gpu_types": None,
        "network_mode": "public", "allowed_hosts": [], "env": {}, "workdir": None,
        "healthcheck": None, "skills_dir": None, "build_timeout_s": 600.0, "mcp_servers": []}
    assert {k: cfg[k] for k in (
        "schema_version", "agent_timeout_s", "verifier_timeout_s", "build_timeout_s",
        "agent_user", "verifier_user", "agent_network_mode", "verifier_network_mode",
        "solution_env", "verifier_env", "verifier_mode", "verifier_environment", "artifacts",
        "steps", "multi_step_reward_strategy", "source_format")} == {
        "schema_version": None, "agent_timeout_s": 600.0, "verifier_timeout_s": 600.0,
        "build_timeout_s": 600.0, "agent_user": None, "verifier_user": None,
        "agent_network_mode": None, "verifier_network_mode": None, "solution_env": {},
        "verifier_env": {}, "verifier_mode": "shared", "verifier_environment": None,
        "artifacts": [], "steps": None, "multi_step_reward_strategy": None,
        "source_format": "harbor"}
    # the first loader's flat keys stay, as aliases of the environment's values
    assert (cfg["cpus"], cfg["memory_mb"], cfg["docker_image"], cfg["network"]) == (
        1.0, 2048, None, True)
    assert t.meta["timeout_s"] == 600.0


def test_every_field_is_read(tmp_path: Path) -> None:
    toml = """
schema_version = "1.3"
source = "contrib"
artifacts = ["/app/out.txt", { source = "/app/logs", destination = "logs", exclude = ["*.tmp"] }]

[task]
name = "acme/hello"

[metadata]
difficulty = "hard"

[agent]
timeout_sec = 45
user = "agent"
network_mode = "no-network"

[verifier]
timeout_sec = 15.5
user = 0
network_mode = "allowlist"
allowed_hosts = ["PyPI.org.", "*.files.pythonhosted.org", "10.0.0.0/8", "2001:DB8::1"]
env = { MODE = "strict", KEY = "${API_KEY:-none}" }

[solution]
env = { GREETING = "hi" }

[environment]
docker_image = "debian:bookworm-slim"
build_timeout_sec = 90
cpus = 2
memory_mb = 512
storage_mb = 4096
gpus = 0
network_mode = "no-network"
workdir = "/srv"
skills_dir = "/skills"
env = { APP_MODE = "test" }

[environment.healthcheck]
command = "test -f /ready"
interval_sec = 1
retries = 5
"""
    cfg = cfg_of(tmp_path, toml)
    d = tmp_path / "t"
    env = cfg["environment"]
    assert (env["docker_image"], env["cpus"], env["memory_mb"], env["storage_mb"],
            env["gpus"], env["network_mode"], env["workdir"], env["skills_dir"],
            env["env"], env["build_timeout_s"]) == (
        "debian:bookworm-slim", 2.0, 512, 4096, 0, "no-network", "/srv", "/skills",
        {"APP_MODE": "test"}, 90.0)
    assert env["healthcheck"] == {"command": "test -f /ready", "interval_s": 1.0,
                                  "timeout_s": 30.0, "start_period_s": 0.0,
                                  "start_interval_s": 5.0, "retries": 5}
    assert (cfg["schema_version"], cfg["name"], cfg["source"]) == ("1.3", "acme/hello",
                                                                    "contrib")
    assert (cfg["agent_timeout_s"], cfg["agent_user"], cfg["agent_network_mode"]) == (
        45.0, "agent", "no-network")
    assert (cfg["verifier_timeout_s"], cfg["verifier_user"], cfg["verifier_network_mode"]) == (
        15.5, 0, "allowlist")
    assert cfg["verifier_allowed_hosts"] == ["pypi.org", "*.files.pythonhosted.org",
                                             "10.0.0.0/8", "2001:db8::1"]
    assert cfg["verifier_env"] == {"MODE": "strict", "KEY": "${API_KEY:-none}"}  # raw
    assert cfg["solution_env"] == {"GREETING": "hi"}
    assert cfg["artifacts"] == [
        {"source": "/app/out.txt", "destination": None, "exclude": [], "service": None},
        {"source": "/app/logs", "destination": "logs", "exclude": ["*.tmp"], "service": None}]
    assert (cfg["build_timeout_s"], cfg["network"], cfg["tests_dir"]) == (
        90.0, False, str(d / "tests"))


def test_version_is_the_old_name_of_schema_version(tmp_path: Path) -> None:
    assert cfg_of(tmp_path / "a", 'version = "1.0"')["schema_version"] == "1.0"
    assert cfg_of(tmp_path / "b", 'version = "1.0"\nschema_version = "1.2"'
                  )["schema_version"] == "1.2"
    refused(tmp_path / "c", "version = 1.0", "schema_version", 'schema_version = "1.0"')


def test_legacy_memory_and_storage_sizes(tmp_path: Path) -> None:
    env = cfg_of(tmp_path / "a", '[environment]\nmemory = "2G"\nstorage = "512M"'
                 )["environment"]
    assert (env["memory_mb"], env["storage_mb"]) == (2048, 512)
    assert cfg_of(tmp_path / "b", '[environment]\nmemory = "2048K"')["environment"][
        "memory_mb"] == 2
    assert cfg_of(tmp_path / "c", '[environment]\nmemory = "1G"\nmemory_mb = 1024'
                  )["environment"]["memory_mb"] == 1024
    # Harbor reads the legacy field only as a string; a number there is ignored
    assert cfg_of(tmp_path / "d", "[environment]\nmemory = 4096")["environment"][
        "memory_mb"] == 2048
    refused(tmp_path / "e", '[environment]\nmemory = "2GB"', "task.toml", "[environment] "
            "memory", "'2G'", "memory_mb")
    refused(tmp_path / "f", '[environment]\nmemory = "1G"\nmemory_mb = 2048', "disagrees",
            "memory_mb = 2048")


def test_allow_internet_is_the_legacy_network_switch(tmp_path: Path) -> None:
    assert cfg_of(tmp_path / "a", "[environment]\nallow_internet = false")["environment"][
        "network_mode"] == "no-network"
    assert cfg_of(tmp_path / "b", "[environment]\nallow_internet = true")["environment"][
        "network_mode"] == "public"
    assert cfg_of(tmp_path / "c", '[environment]\nallow_internet = false\nnetwork_mode = '
                  '"public"')["environment"]["network_mode"] == "public"
    cfg = cfg_of(tmp_path / "d", "[verifier.environment]\nallow_internet = false")
    assert cfg["verifier_environment"]["network_mode"] == "no-network"
    refused(tmp_path / "e", '[environment]\nallow_internet = "yes"', "allow_internet",
            "true or false")


@pytest.mark.parametrize("toml, field", [
    ('[environment]\nnetwork_mode = "bridge"', "[environment] network_mode"),
    ('[agent]\nnetwork_mode = "none"', "[agent] network_mode"),
    ('[verifier.environment]\nnetwork_mode = "host"', "[verifier.environment] network_mode"),
])
def test_an_unknown_network_mode_is_refused(tmp_path: Path, toml: str, field: str) -> None:
    refused(tmp_path, toml, "task.toml", field, "'public'", "'no-network'", "'allowlist'")


@pytest.mark.parametrize("toml, fragment", [
    ('[environment]\nallowed_hosts = ["pypi.org"]', "network_mode = 'allowlist'"),
    ('[agent]\nallowed_hosts = ["pypi.org"]', "network_mode = 'allowlist'"),
    ('[verifier]\nnetwork_mode = "public"\nallowed_hosts = ["pypi.org"]', "not 'public'"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["https://pypi.org"]',
     "not a URL"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org:443"]',
     "not a URL, port"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.*.org"]', "hostname"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["*.10.0.0.1"]',
     "not an IP"),
])
def test_allowed_hosts_follow_harbors_rules(tmp_path: Path, toml: str, fragment: str) -> None:
    refused(tmp_path, toml, "allowed_hosts", fragment)


@pytest.mark.parametrize("toml, fragment", [
    ('[agent]\ntimeout_sec = "ten"', "[agent] timeout_sec must be a number"),
    ("[verifier]\ntimeout_sec = true", "[verifier] timeout_sec must be a number"),
    ("[verifier.env]\nRETRIES = 3", 'RETRIES = "3"'),
    ("[agent]\nuser = true", "[agent] user must be a user name or a UID"),
    ('[environment]\nmemory_mb = "1G"', "[environment] memory_mb must be a whole number"),
    ("[environment]\nworkdir = 7", "[environment] workdir must be a string"),
    ("[environment.healthcheck]\ninterval_sec = 1", "[environment.healthcheck] command is "
     "missing"),
    ('[environment]\nos = "windows"', "Linux containers only"),
    ('[task]\nname = "hello"', "[task] name = 'hello' must be 'org/name'"),
    ('multi_step_reward_strategy = "max"', "'mean' or 'final'"),
    ('[verifier]\nenvironment_mode = "isolated"', "[verifier] environment_mode"),
    ("environment = 3", "environment must be a table"),
    ("not = [toml", "not valid TOML"),
])
def test_a_misread_field_is_named_with_its_fix(tmp_path: Path, toml: str, fragment: str
                                                ) -> None:
    msg = refused(tmp_path, toml, fragment)
    assert str(tmp_path / "t") in msg


def test_unknown_keys_are_ignored_as_in_harbor(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path, '[environment]\ncolour = "blue"\n[agent]\nmodel = "x"')
    assert cfg["environment"]["network_mode"] == "public"


def test_the_environment_needs_a_definition(tmp_path: Path) -> None:
    refused(tmp_path / "a", "", "neither environment/Dockerfile nor", dockerfile=False)
    assert cfg_of(tmp_path / "b", '[environment]\ndocker_image = "x:1"', dockerfile=False
                  )["docker_image"] == "x:1"
    assert cfg_of(tmp_path / "c", "", dockerfile=False, files={
        "environment/docker-compose.yaml": "services: {main: {build: .}}\n"})["steps"] is None


# ------------------------------------------------------------------------------ verifier
@pytest.mark.parametrize("toml, mode, source", [
    ("", "shared", None),
    ('[verifier]\nenvironment_mode = "shared"', "shared", None),
    ('[verifier]\nenvironment_mode = "separate"', "separate", "environment"),
    ("[verifier.environment]\ncpus = 3", "separate", "verifier"),
    ('[verifier]\nenvironment_mode = "separate"\n[verifier.environment]\ncpus = 3', "separate",
     "verifier"),
])
def test_verifier_mode_is_resolved_as_harbor_does(tmp_path: Path, toml: str, mode: str,
                                                  source: str | None) -> None:
    cfg = cfg_of(tmp_path, toml + "\n[environment]\ncpus = 2\nworkdir = '/w'")
    assert cfg["verifier_mode"] == mode
    v = cfg["verifier_environment"]
    if source is None:
        assert v is None
        return
    # the verifier's image is built from tests/ (tests/Dockerfile), whatever its settings
    assert v["build_dir"] == str(tmp_path / "t" / "tests")
    if source == "environment":  # a fresh copy of [environment]
        assert (v["cpus"], v["workdir"]) == (2.0, "/w")
        assert v is not cfg["environment"] and v["env"] is not cfg["environment"]["env"]
    else:
        assert (v["cpus"], v["workdir"]) == (3.0, None)


def test_shared_mode_with_a_verifier_environment_is_a_conflict(tmp_path: Path) -> None:
    refused(tmp_path, '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\n'
            'cpus = 1', "environment_mode", "conflicts with [verifier.environment]",
            "'separate'")


def test_a_separate_verifier_needs_no_test_sh_but_a_shared_one_does(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path / "a", '[verifier]\nenvironment_mode = "separate"', test_sh=False,
                 files={"tests/Dockerfile": "FROM debian:bookworm-slim\n"})
    assert cfg["verifier_mode"] == "separate"
    refused(tmp_path / "b", "", "tests/test.sh is missing", test_sh=False)


def test_a_windows_only_test_script_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, "", "test.bat", "Windows", "test.sh", test_sh=False,
            files={"tests/test.bat": "echo 1\n"})


@pytest.mark.parametrize("entry, fragment", [
    ('"/app/../etc"', "must not contain '..'"),
    ('{ source = "/a", destination = "/abs" }', "relative path"),
    ('{ source = "/a", destination = "manifest.json" }', "manifest.json"),
    ('{ source = "rel", service = "db" }', "must be absolute"),
    ("{ destination = \"x\" }", "needs source"),
])
def test_artifacts_are_checked(tmp_path: Path, entry: str, fragment: str) -> None:
    refused(tmp_path, f"artifacts = [{entry}]", "artifacts", fragment)


def test_solve_sh_is_the_answer_and_canaries_are_not_shown(tmp_path: Path) -> None:
    t = load_task(write_task(tmp_path, instruction="<!-- canary GUID 123 -->\n# canary x\n\n"
                             "Print hi.\n", files={"solution/solve.sh": "echo hi\n"}))
    assert (t.prompt, t.answer) == ("Print hi.", "echo hi\n")


# ------------------------------------------------------------------------------ steps
STEPS = """
[agent]
timeout_sec = 100
user = "agent"

[verifier]
timeout_sec = 50
user = "checker"
env = { A = "task", B = "task" }

[[steps]]
name = "one"
min_reward = 1
artifacts = ["/app/one.txt"]

[steps.agent]
timeout_sec = 30
network_mode = "no-network"

[steps.verifier]
env = { B = "step" }
user = "root"

[steps.healthcheck]
command = "test -x /app/run"

[[steps]]
name = "two"
min_reward = { correctness = 0.5 }
"""


def steps_task(root: Path, toml: str = STEPS, **files: str) -> Path:
    base = {"steps/one/instruction.md": "First.\n", "steps/one/tests/test.sh": "exit 0\n",
            "steps/one/solution/solve.sh": "echo one\n", "steps/one/workdir/setup.sh": "true\n",
            "steps/two/instruction.md": "Second.\n", "solution/solve.sh": "echo task\n"}
    return write_task(root, toml, instruction=None, files={**base, **files})


def test_steps_get_harbors_fallbacks(tmp_path: Path) -> None:
    d = steps_task(tmp_path)
    t = load_task(d)
    cfg = t.meta["config"]
    one, two = cfg["steps"]
    assert (t.prompt, t.answer) == ("First.", "echo one\n")  # the first step's
    assert cfg["multi_step_reward_strategy"] == "mean"
    assert (one["name"], one["instruction"], two["instruction"]) == ("one", "First.", "Second.")
    # agent timeout and users: the step's, else the task's
    assert (one["agent_timeout_s"], two["agent_timeout_s"]) == (30.0, 100.0)
    assert (one["agent_user"], two["agent_user"]) == ("agent", "agent")
    assert (one["verifier_user"], two["verifier_user"]) == ("root", "checker")
    # a step's verifier timeout is its own or 600 s, not the task's (Harbor's StepConfig)
    assert (one["verifier_timeout_s"], two["verifier_timeout_s"]) == (600.0, 600.0)
    assert one["verifier_env"] == {"A": "task", "B": "step"}
    assert two["verifier_env"] == {"A": "task", "B": "task"}
    assert (one["agent_network_mode"], two["agent_network_mode"]) == ("no-network", None)
    assert (one["min_reward"], two["min_reward"]) == (1.0, {"correctness": 0.5})
    assert one["healthcheck"]["command"] == "test -x /app/run" and two["healthcheck"] is None
    assert one["artifacts"][0]["source"] == "/app/one.txt" and two["artifacts"] == []
    # tests: the step's own test.sh, else tests/test.sh; both folders go to /tests
    assert one["tests_dir"] == str(d / "steps/one/tests")
    assert two["tests_dir"] == str(d / "tests")
    assert one["tests_dirs"] == [str(d / "tests"), str(d / "steps/one/tests")]
    assert two["tests_dirs"] == [str(d / "tests")]
    # solution: the step's folder, else the task's
    assert (one["solution_dir"], one["solve_path"]) == (
        str(d / "steps/one/solution"), str(d / "steps/one/solution/solve.sh"))
    assert (two["solution_dir"], two["solve_path"]) == (
        str(d / "solution"), str(d / "solution/solve.sh"))
    assert (one["workdir_dir"], two["workdir_dir"]) == (str(d / "steps/one/workdir"), None)
    assert one["verifier_mode"] == two["verifier_mode"] == "shared"
    json.dumps(cfg)


def test_a_step_solution_folder_without_solve_sh_does_not_fall_back(tmp_path: Path) -> None:
    d = steps_task(tmp_path, **{"steps/two/solution/README": "no script\n"})
    two = load_task(d).meta["config"]["steps"][1]
    assert (two["solution_dir"], two["solve_path"]) == (str(d / "steps/two/solution"), None)


def test_reward_strategy_final_is_read(tmp_path: Path) -> None:
    d = steps_task(tmp_path, 'multi_step_reward_strategy = "final"\n' + STEPS)
    assert load_task(d).meta["config"]["multi_step_reward_strategy"] == "final"


def test_step_verifier_modes_and_environments(tmp_path: Path) -> None:
    toml = """
[verifier]
environment_mode = "separate"
[verifier.environment]
cpus = 4
[environment]
cpus = 2

[[steps]]
name = "inherits"

[[steps]]
name = "shared"
[steps.verifier]
environment_mode = "shared"

[[steps]]
name = "own-env"
[steps.verifier.environment]
cpus = 8
"""
    files = {f"steps/{n}/instruction.md": "x\n" for n in ("inherits", "shared", "own-env")}
    files["steps/own-env/tests/Dockerfile"] = "FROM debian:bookworm-slim\n"
    d = write_task(tmp_path, toml, instruction=None, files=files)
    inherits, shared, own = load_task(d).meta["config"]["steps"]
    assert inherits["verifier_mode"] == "separate"
    assert (inherits["verifier_environment"]["cpus"],
            inherits["verifier_environment"]["build_dir"]) == (4.0, str(d / "tests"))
    assert (shared["verifier_mode"], shared["verifier_environment"]) == ("shared", None)
    assert (own["verifier_mode"], own["verifier_environment"]["cpus"]) == ("separate", 8.0)
    assert own["verifier_environment"]["build_dir"] == str(d / "steps/own-env/tests")


def test_a_step_environment_implies_separate_under_a_shared_task(tmp_path: Path) -> None:
    toml = '[[steps]]\nname = "s"\n[steps.verifier.environment]\nnetwork_mode = "no-network"\n'
    d = write_task(tmp_path, toml, instruction=None, test_sh=False,
                   files={"steps/s/instruction.md": "x\n"})
    (s,) = load_task(d).meta["config"]["steps"]
    assert (s["verifier_mode"], s["verifier_environment"]["network_mode"]) == (
        "separate", "no-network")
    assert s["tests_dir"] is None  # the verifier's image holds /tests


@pytest.mark.parametrize("toml, files, fragment", [
    ('[[steps]]\nname = "a"', {}, "steps/a/instruction.md"),
    ('[[steps]]\nname = "a"', {"steps/a/instruction.md": "x"},
     "add steps/a/tests/test.sh or tests/test.sh"),
    ('[[steps]]\nname = "a"\n[[steps]]\nname = "a"', {"steps/a/instruction.md": "x",
                                                       "tests/test.sh": "x"}, "used twice"),
    ('[[steps]]\nname = "../a"', {}, "every step needs a name"),
    ('[[steps]]\nname = "a"\nmin_reward = "high"', {"steps/a/instruction.md": "x",
                                                    "tests/test.sh": "x"}, "min_reward"),
])
def test_bad_steps_are_refused(tmp_path: Path, toml: str, files: dict[str, str],
                               fragment: str) -> None:
    refused(tmp_path, toml, fragment, instruction=None, test_sh=False, files=files)


def test_a_dataset_holds_single_and_multi_step_tasks(tmp_path: Path) -> None:
    write_task(tmp_path, name="single")
    steps_task(tmp_path / "x")
    (tmp_path / "x" / "t").rename(tmp_path / "multi")
    (tmp_path / "notes").mkdir()
    assert [t.id for t in load_tasks(tmp_path)] == ["multi", "single"]


# ------------------------------------------------------------------------------ resolve_env
def test_resolve_env_fills_whole_templates_from_the_host(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("SKYHUB_T_SET", "from-host")
    monkeypatch.delenv("SKYHUB_T_UNSET", raising=False)
    assert resolve_env({
        "literal": "plain", "set": "${SKYHUB_T_SET}", "default": "${SKYHUB_T_UNSET:-dflt}",
        "set_wins": "${SKYHUB_T_SET:-dflt}", "empty": "${SKYHUB_T_UNSET:-}",
        "partial": "a-${SKYHUB_T_SET}"}) == {
        "literal": "plain", "set": "from-host", "default": "dflt", "set_wins": "from-host",
        "empty": "", "partial": "a-${SKYHUB_T_SET}"}


def test_resolve_env_names_a_missing_variable_and_the_task(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.delenv("SKYHUB_T_UNSET", raising=False)
    with pytest.raises(UsageError, match=r"hello-task.*SKYHUB_T_UNSET.*export it"):
        resolve_env({"TOKEN": "${SKYHUB_T_UNSET}"}, task="hello-task")
