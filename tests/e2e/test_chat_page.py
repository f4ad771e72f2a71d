"""The chat page at GET / in a real headless Chromium (Selenium, the Debian chromium and
chromium-driver packages) against a CPU server: the model list, a streamed answer with its
TTFT and tok/s, a multi-turn request, Stop cancelling the generation on the server, and the
API key prompt. A screenshot of the page after an answer goes to
build/test-reports/chat-page.png (with -narrow, -stopped, -key and -error beside it).

Without chromium, chromedriver or selenium the browser tests skip, except under CI=true,
where they fail. Every wait is bounded; the file takes about half a minute on 2 cores."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
from pathlib import Path

import httpx
import pytest

from llamaserve_e2e import MODEL_NAME, REPO_ROOT, wait_for

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REPORTS = REPO_ROOT / "build" / "test-reports"
WAIT_S = 30

# Records the body and headers of every fetch() the page makes, for the test to read back.
RECORD_FETCHES = """
window.recordedRequests = [];
const originalFetch = window.fetch;
window.fetch = (url, init) => {
  window.recordedRequests.push({url: String(url), headers: (init && init.headers) || {},
                                body: init && init.body ? JSON.parse(init.body) : null});
  return originalFetch(url, init);
};
"""

# The last assistant answer: its state, text and the stats shown under it.
LAST_ANSWER = """
const answers = document.querySelectorAll('.msg.assistant');
const last = answers[answers.length - 1];
if (!last) return null;
const stat = (name) => {
  const element = last.querySelector('.stat.' + name);
  return element ? {text: element.textContent, value: element.dataset.value || null} : null;
};
return {state: last.dataset.state, text: last.querySelector('.bubble').textContent,
        ttft: stat('ttft'), tps: stat('tps'), tokens: stat('tokens'), stopped: stat('stopped'),
        count: answers.length};
"""


def browser_missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the Python package selenium is not installed"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is missing (Debian packages chromium and chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = browser_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the browser test cannot run: {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--window-size=1200,820", "--force-device-scale-factor=1",
                     f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with pytest.MonkeyPatch.context() as patch:
        # Both paths are given, so Selenium Manager is never asked to find (or fetch) anything.
        patch.setenv("SE_OFFLINE", "true")
        patch.setenv("SE_AVOID_STATS", "true")
        driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)),
                                  options=options)
    driver.set_page_load_timeout(WAIT_S)
    driver.set_script_timeout(WAIT_S)
    yield driver
    driver.quit()


def open_page(driver, url: str):
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{url}/")
    driver.execute_script(RECORD_FETCHES)
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.05)


def model_options(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.getElementById('model').options, (o) => o.textContent);")


def fill(driver, element_id: str, value: str) -> None:
    element = driver.find_element("id", element_id)
    element.clear()
    element.send_keys(value)


def send(driver, prompt: str, max_tokens: int) -> None:
    fill(driver, "temperature", "0")
    fill(driver, "max-tokens", str(max_tokens))
    fill(driver, "prompt", prompt)
    driver.find_element("id", "send").click()


def watch_answer(driver, until, timeout_s: float = WAIT_S) -> tuple[dict, list[int]]:
    """Polls the last answer until `until(answer)`; returns it and the text lengths seen while
    it was still streaming."""
    lengths = []
    deadline = time.monotonic() + timeout_s
    while True:
        answer = driver.execute_script(LAST_ANSWER)
        if answer and answer["state"] in ("waiting", "streaming"):
            lengths.append(len(answer["text"]))
        if answer and until(answer):
            return answer, lengths
        assert time.monotonic() < deadline, f"gave up waiting; last answer: {answer}"
        time.sleep(0.02)


def assert_no_csp_violation(driver) -> None:
    messages = [entry["message"] for entry in driver.get_log("browser")]
    assert not [m for m in messages if "Content Security Policy" in m], messages


def save_screenshot(driver, name: str) -> Path:
    REPORTS.mkdir(parents=True, exist_ok=True)
    path = REPORTS / name
    assert driver.save_screenshot(str(path)), path
    return path


def cancelled(server) -> float:
    return server.metrics().total("llamaserve_generations_finished_total", reason="cancelled")


def test_page_headers_and_csp_hashes(server):
    """The CSP names the page's own inline script and style by hash, and nothing else runs."""
    response = httpx.get(f"{server.url}/", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "cache-control" in response.headers
    policy = response.headers["content-security-policy"]
    assert "connect-src 'self'" in policy and "unsafe-inline" not in policy
    for tag, directive in (("script", "script-src"), ("style", "style-src")):
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>".encode(), response.content, re.S)
        assert len(blocks) == 1, tag
        digest = base64.b64encode(hashlib.sha256(blocks[0]).digest()).decode()
        assert f"{directive} 'sha256-{digest}'" in policy, (tag, policy)
    assert not re.search(rb"<(script|link|img|iframe)[^>]+(src|href)=\"https?:", response.content)


def test_streams_an_answer_then_stop_cancels(server, browser):
    driver = browser
    wait = open_page(driver, server.url)
    wait.until(lambda d: model_options(d))
    from selenium.webdriver.support.ui import Select

    select = Select(driver.find_element("id", "model"))
    select.select_by_value(MODEL_NAME)
    assert select.first_selected_option.text == f"{MODEL_NAME} (loaded)"
    assert "loaded" in driver.find_element("id", "model-info").text

    # A first answer: it grows while it streams, then shows TTFT and tok/s.
    send(driver, "Write a short paragraph about the ocean.", max_tokens=40)
    answer, lengths = watch_answer(driver, lambda a: a["state"] not in ("waiting", "streaming"))
    assert answer["state"] == "done", answer
    growing = sorted({length for length in lengths if length > 0})
    assert len(growing) >= 2, f"the text did not grow while streaming: {lengths}"
    assert len(answer["text"]) > growing[0]
    assert answer["ttft"] and float(answer["ttft"]["value"]) > 0, answer
    assert answer["ttft"]["text"].endswith(" ms")
    assert answer["tps"] and float(answer["tps"]["value"]) > 0, answer
    assert answer["tps"]["text"].endswith(" tok/s")
    assert answer["tokens"]["value"] == "40", answer
    first_answer = answer["text"]
    request = driver.execute_script("return window.recordedRequests.at(-1);")
    assert request["url"] == "/v1/chat/completions"
    assert request["body"]["stream"] is True
    assert request["body"]["stream_options"] == {"include_usage": True}
    assert request["body"]["model"] == MODEL_NAME
    assert_no_csp_violation(driver)
    save_screenshot(driver, "chat-page.png")
    driver.set_window_size(390, 820)
    save_screenshot(driver, "chat-page-narrow.png")
    driver.set_window_size(1200, 820)

    # A long second turn, stopped while it streams: the text stops growing, the page says so,
    # and the server counts the generation as cancelled.
    before = cancelled(server)
    send(driver, "Count from 1 to 300, separated by commas.", max_tokens=256)
    seen = set()

    def grown_twice(answer: dict) -> bool:
        seen.add(len(answer["text"]))
        return answer["state"] not in ("waiting", "streaming") or len(seen - {0}) >= 3

    answer, _ = watch_answer(driver, grown_twice)
    assert answer["state"] == "streaming", f"the answer ended before Stop was pressed: {answer}"
    request = driver.execute_script("return window.recordedRequests.at(-1);")
    assert [m["role"] for m in request["body"]["messages"]] == ["user", "assistant", "user"]
    assert request["body"]["messages"][1]["content"] == first_answer
    driver.find_element("id", "stop").click()
    answer, _ = watch_answer(driver, lambda a: a["state"] != "streaming", timeout_s=10)
    assert answer["state"] == "stopped", answer
    assert answer["stopped"]["text"] == "Stopped"
    stopped_text = answer["text"]
    time.sleep(0.5)
    assert driver.execute_script(LAST_ANSWER)["text"] == stopped_text
    assert wait_for(lambda: cancelled(server) >= before + 1, timeout_s=10), \
        f"no cancelled generation counted (before: {before}, now: {cancelled(server)})"
    assert driver.find_element("id", "send").is_displayed()
    assert not driver.find_element("id", "stop").is_displayed()
    save_screenshot(driver, "chat-page-stopped.png")


def test_asks_for_the_api_key(make_server, browser):
    driver = browser
    server = make_server("--api-key", "page-key", "--max-running", "2", wait_ready=False)
    server.wait_ready(headers={"Authorization": "Bearer page-key"})
    wait = open_page(driver, server.url)
    prompt = driver.find_element("id", "key-prompt")
    wait.until(lambda d: prompt.is_displayed())
    assert "needs an API key" in prompt.text, prompt.text
    save_screenshot(driver, "chat-page-key.png")
    assert model_options(driver) == []

    fill(driver, "api-key", "wrong-key")
    driver.find_element("id", "key-save").click()
    wait.until(lambda d: "refused" in prompt.text)
    fill(driver, "api-key", "page-key")
    driver.find_element("id", "key-save").click()
    wait.until(lambda d: model_options(d) and not prompt.is_displayed())
    assert driver.execute_script("return sessionStorage.getItem('llamaserve.apiKey');") == "page-key"

    send(driver, "Say hello.", max_tokens=8)
    answer, _ = watch_answer(driver, lambda a: a["state"] not in ("waiting", "streaming"))
    assert answer["state"] == "done", answer
    assert answer["text"]
    request = driver.execute_script("return window.recordedRequests.at(-1);")
    assert request["headers"]["Authorization"] == "Bearer page-key"

    # An invalid request shows the API's own message.
    send(driver, "Say hello.", max_tokens=100000)
    answer, _ = watch_answer(driver, lambda a: a["state"] not in ("waiting", "streaming"))
    assert answer["state"] == "error", answer
    assert answer["text"].startswith("The server rejected the request (400): "), answer
    assert "max_tokens" in answer["text"], answer
    save_screenshot(driver, "chat-page-error.png")

    # The key outlives a reload of the tab.
    driver.refresh()
    wait.until(lambda d: model_options(d))
    assert not driver.find_element("id", "key-prompt").is_displayed()
    assert_no_csp_violation(driver)
