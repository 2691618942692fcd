"""`skyhub view` in a real browser: headless Chromium (Debian's package, driven by Selenium
through the system chromedriver, never a downloaded browser) clicks through a real eval run
and a real training run served by `skyhub view` as a subprocess.

Without Chromium the tests skip, and fail where CI requires the browser
(SKYHUB_REQUIRE_BROWSER=1). With SKYHUB_WRITE_SCREENSHOTS=1 they rewrite the README's
screenshots, docs/images/view-*.png (otherwise the screenshots go to a temporary folder).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from view_runs import SKYHUB, make_runs

from skyhub.eval.compare import compare_runs
from skyhub.eval.rundir import load_records

ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 60  # generous: a loaded CI machine is slow, and every wait polls
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"


def _which(names: tuple[str, ...]) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture(scope="session")
def chromium(need: Callable[[str, str, str], None]) -> tuple[str, str]:
    """(browser, chromedriver) of the system, checked first: without them every test here
    skips (or fails, under SKYHUB_REQUIRE_BROWSER=1) before any run is made."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        need("Selenium", "SKYHUB_REQUIRE_BROWSER", "the selenium package is not installed "
             "(pip install selenium)")
    browser, chromedriver = _which(CHROMIUM), shutil.which(DRIVER)
    if browser is None or chromedriver is None:
        need("Chromium", "SKYHUB_REQUIRE_BROWSER",
             f"{'chromium' if browser is None else 'chromedriver'} is not on the PATH "
             "(apt-get install -y chromium chromium-driver)")
    return browser, chromedriver


@pytest.fixture(scope="session")
def runs(chromium: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.getbasetemp() / "view-runs")


@pytest.fixture(scope="module")
def driver(chromium: tuple[str, str], request: pytest.FixtureRequest) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = chromium
    # the server starts now (the runs made first), to boot while the browser does
    request.getfixturevalue("started")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never download anything
    d = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    d.set_page_load_timeout(WAIT_S)
    try:
        yield d
    finally:
        d.quit()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def started(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[tuple[subprocess.Popen, str, Path]]:
    """`skyhub view` on the three runs, as a user starts it (not yet answering: the browser
    starts meanwhile)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("view-server") / "log.txt"
    with log.open("w") as out:  # from the runs' folder, named as a user types them
        proc = subprocess.Popen([*SKYHUB, "view", "random", "scripted", "train",
                                 "--port", str(port)], cwd=runs["train"].parent,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, f"http://127.0.0.1:{port}", log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def server(started: tuple[subprocess.Popen, str, Path], driver: object) -> str:
    """The URL of `skyhub view`, once it answers."""
    proc, url, log = started
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/runs", timeout=5) as r:
                if r.status == 200:
                    return url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"skyhub view did not start:\n{log.read_text()}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[object, str], Path]:
    """`shot(driver, name)`: a screenshot of the whole page, to docs/images/view-NAME.png
    with SKYHUB_WRITE_SCREENSHOTS=1, else to a temporary folder."""
    folder = (ROOT / "docs" / "images" if os.environ.get("SKYHUB_WRITE_SCREENSHOTS") == "1"
              else tmp_path_factory.mktemp("view-shots"))
    folder.mkdir(parents=True, exist_ok=True)

    def shot(d, name: str) -> Path:
        height = d.execute_script("return document.documentElement.scrollHeight")
        d.set_window_size(1280, max(700, min(int(height) + 20, 1800)))
        path = folder / f"view-{name}.png"
        assert d.save_screenshot(str(path))
        d.set_window_size(1280, 900)
        assert path.read_bytes()[:4] == b"\x89PNG"
        return path

    return shot


def wait(d, condition: Callable[[object], object], what: str) -> object:
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    # an element may vanish between finding and reading it while a route redraws: poll again
    ignored = (NoSuchElementException, StaleElementReferenceException)
    try:
        return WebDriverWait(d, WAIT_S, poll_frequency=0.1, ignored_exceptions=ignored).until(
            lambda _: condition(d))
    except Exception:
        errors = [e.text for e in d.find_elements("id", "error")]
        raise AssertionError(f"waited {WAIT_S}s for {what}; page error: {errors}") from None


def rows(d, table_id: str) -> list[object]:
    return d.find_elements("css selector", f"#{table_id} tbody tr")


def open_page(d, url: str) -> None:
    """Load `url` afresh: from the same page, a change of the #fragment alone would keep the
    old page's elements around until the new route has drawn."""
    d.get("about:blank")
    d.get(url)
    wait(d, lambda d: d.execute_script("return document.body.dataset.ready"), "the page")


# ---------------------------------------------------------------------------------- the tests
def test_runs_page_lists_every_run(driver, server: str, shots) -> None:
    open_page(driver, server + "/#/")
    wait(driver, lambda d: len(rows(d, "runs")) == 3, "three runs listed")
    text = driver.find_element("id", "runs").text
    assert "random" in text and "scripted" in text and "training" in text
    shots(driver, "runs")


def test_filter_finds_a_failing_episode_and_opens_its_trajectory(
        driver, server: str, runs: dict[str, Path], shots) -> None:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    records = load_records(runs["scripted"])
    failures = [r for r in records if r["outcome"] == "failure"]
    open_page(driver, server + "/#/")
    wait(driver, lambda d: rows(d, "runs"), "the runs")
    driver.find_element("link text", "scripted").click()
    wait(driver, lambda d: len(rows(d, "episodes")) == len(records), "every episode listed")

    Select(driver.find_element("id", "f-outcome")).select_by_value("failure")
    wait(driver, lambda d: len(rows(d, "episodes")) == len(failures), "only the failures")
    shown = rows(driver, "episodes")
    assert {r.get_attribute("data-outcome") for r in shown} == {"failure"}
    assert [int(r.get_attribute("data-index")) for r in shown] == [f["index"] for f in failures]
    assert "outcome=failure" in driver.current_url  # the filter lives in the URL: shareable
    shots(driver, "episodes")

    rows(driver, "episodes")[0].click()  # the first failure, then the next one of the table
    wait(driver, lambda d: d.find_elements("id", "next"), "the episode's pager")
    assert f"1 of {len(failures)} in the table" in driver.find_element("class name", "pager").text
    driver.find_element("id", "next").click()
    wait(driver, lambda d: d.find_element("css selector", "h1").text.startswith(
        f"Episode {failures[1]['index']}:"), "the next failure")
    driver.find_element("link text", "scripted").click()  # back to the table, filter kept
    wait(driver, lambda d: "outcome=failure" in d.current_url
         and len(rows(d, "episodes")) == len(failures), "the filtered table")

    target = failures[-1]
    search = driver.find_element("id", "f-q")
    search.send_keys(target["task_id"], Keys.ENTER)
    wait(driver, lambda d: len(rows(d, "episodes")) == 1, "the one episode searched for")
    rows(driver, "episodes")[0].click()

    wait(driver, lambda d: d.find_elements("id", "trajectory"), "the trajectory")
    story = driver.find_element("id", "trajectory").text
    assert records[0]["messages"][0]["content"][:60] in story  # the system prompt
    for m in target["messages"][1:]:
        assert m["content"].strip()[:40] in story
    assert "turn 2: agent" in story and "reward 0.000" in story
    breakdown = driver.find_element("id", "breakdown").text
    assert "correct" in breakdown and "format_errors" in breakdown
    assert "failure" in driver.find_element("id", "final-info").text
    shots(driver, "trajectory")

    driver.back()  # to the filtered table
    wait(driver, lambda d: len(rows(d, "episodes")) == 1, "the filtered table again")


def test_the_infra_error_filter_shows_the_errors(driver, server: str,
                                                runs: dict[str, Path]) -> None:
    from selenium.webdriver.support.ui import Select

    infra = [r["index"] for r in load_records(runs["scripted"]) if r["infra_error"]]
    open_page(driver, server + "/#/run/scripted")
    wait(driver, lambda d: rows(d, "episodes"), "the episodes")
    Select(driver.find_element("id", "f-infra")).select_by_value("yes")
    wait(driver, lambda d: len(rows(d, "episodes")) == len(infra), "the infra errors")
    shown = rows(driver, "episodes")
    assert [int(r.get_attribute("data-index")) for r in shown] == infra
    assert all("503 Service Unavailable" in r.text for r in shown)


def test_two_runs_side_by_side_with_compares_statistics(
        driver, server: str, runs: dict[str, Path], shots) -> None:
    from selenium.webdriver.support.ui import Select

    expected = compare_runs([runs["random"], runs["scripted"]])
    pair = expected.pairs[0]
    open_page(driver, server + "/#/")
    wait(driver, lambda d: d.find_elements("id", "compare-go"), "the compare form")
    Select(driver.find_element("id", "cmp-a")).select_by_value("random")
    Select(driver.find_element("id", "cmp-b")).select_by_value("scripted")
    driver.find_element("id", "compare-go").click()
    wait(driver, lambda d: d.find_elements("id", "compare-stats"), "the comparison")
    stats = driver.find_element("id", "compare-stats").text
    assert f"{pair.b} / {pair.c}" in stats
    mcnemar = "<0.0001" if pair.mcnemar_p < 1e-4 else f"{pair.mcnemar_p:.4f}"
    assert mcnemar in stats and f"{pair.accuracy_diff:+.3f}" in stats
    lo, hi = expected.runs[1].ci95
    assert f"[{lo:.3f}, {hi:.3f}]" in stats
    assert len(rows(driver, "compare-rows")) == expected.runs[1].n
    shots(driver, "compare")

    driver.find_element("id", "only-diff").click()
    wait(driver, lambda d: "diff=1" in d.current_url
         and len(rows(d, "compare-rows")) == pair.b + pair.c, "the disagreements")
    verdicts = {r.get_attribute("data-verdict") for r in rows(driver, "compare-rows")}
    assert verdicts == {"b only"}


def test_training_run_curves_and_sample_episodes(driver, server: str, runs: dict[str, Path],
                                                 shots) -> None:
    from selenium.webdriver.support.ui import Select

    metrics = [json.loads(x) for x in (runs["train"] / "metrics.jsonl").read_text().splitlines()]
    open_page(driver, server + "/#/")
    wait(driver, lambda d: rows(d, "runs"), "the runs")
    driver.find_element("link text", "train").click()
    wait(driver, lambda d: d.find_elements("css selector", "#curves .chart"), "the curves")
    titles = [c.get_attribute("data-title")
              for c in driver.find_elements("css selector", "#curves .chart")]
    for title in ("reward", "success rate", "loss", "entropy", "step time (s)"):
        assert title in titles
    reward = driver.find_element("css selector", '#curves .chart[data-title="reward"]')
    line = reward.find_element("css selector", 'polyline[data-key="reward_mean"]')
    assert len(line.get_attribute("points").split()) == len(metrics)  # one point per step
    Select(driver.find_element("id", "more-metric")).select_by_value("lr")
    wait(driver, lambda d: d.find_elements("css selector", '#extra-curves .chart[data-title="lr"]'),
         "the extra curve")

    wait(driver, lambda d: len(rows(d, "episodes")) == 16, "the last step's episodes (4 x 4)")
    Select(driver.find_element("id", "step-pick")).select_by_value("1")
    wait(driver, lambda d: "of step 1 shown" in d.find_element("id", "shown").text,
         "step 1's sample episodes")
    assert len(rows(driver, "episodes")) == 16
    shots(driver, "training")
    rows(driver, "episodes")[0].click()
    wait(driver, lambda d: d.find_elements("id", "trajectory"), "a training episode")
    assert "recall" in driver.find_element("css selector", "h1").text
