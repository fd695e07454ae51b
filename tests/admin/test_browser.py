"""The admin pages in a real browser: Debian's headless Chromium, driven by selenium through
Debian's chromedriver (``make browser``, hack/install-browser.sh), against ``tether admin``
on the session's KCP plane with a fleet this module builds.

One browser for the module. Each test signs in through the login form (typing the token into
the textarea and submitting, as an operator does; the browser's own ``Origin`` and
``Sec-Fetch-Site`` pass the same-origin check, and it then holds a session cookie) and reads
the pages as a user sees them: titles and headings, the scenario's facts, search and
pagination, the 403 page, and the browser console after every page (no SEVERE entry: scripts
errors, resources that did not load and Content-Security-Policy violations all land there).

**TLS.** The admin serves a certificate of the test's own CA. Chromium on Linux trusts the
CAs of the NSS database in ``$HOME/.pki/nssdb``; the fixture gives chromedriver (and so
Chromium) a HOME of its own whose database holds only that CA as a trusted issuer
(``certutil`` from libnss3-tools), so the certificate is verified as in production and no
``--ignore-certificate-errors`` is needed: an untrusted certificate would show Chromium's
interstitial instead of the page, and every title check would fail.

**No downloads.** The browser and the driver are the system's (``/usr/bin/chromium``,
``/usr/bin/chromedriver``), passed explicitly, and ``SE_OFFLINE`` keeps Selenium Manager
from reaching out.

``TETHER_SCREENSHOTS=1`` writes one screenshot per page to ``docs/images/admin-*.png``
(shown in docs/operations.md, "Admin pages"); CI leaves the tracked files alone.
"""

from __future__ import annotations

import html
import http.server
import json
import os
import pathlib
import shutil
import ssl
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from kubernetes import client
from selenium import webdriver
from selenium.common import exceptions
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from admin import guard as admin_guard
from listener.fleet import heartbeat
from testing import adminenv, controlplane
from testing.docanchors import OPERATIONS, github_anchors
from tether.kube import apitypes
from tether.wire import delivery

pytestmark = pytest.mark.processes

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WINDOW = (1366, 900)
IMAGES = adminenv.REPO / "docs" / "images"
XSS = "<img src=x onerror=alert(1)>"
HEALTHY = 6  # with the three below: 9 runtimes, two fleet pages of 5


class Docs(NamedTuple):
    base: str  # the runbook base the admin is given (TETHER_ADMIN_RUNBOOK_BASE)


def rendered_operations() -> bytes:
    """docs/operations.md as a page whose headings carry the ids GitHub renders (the rest as
    escaped text): what a runbook link lands on."""
    anchors = iter(github_anchors(OPERATIONS.read_text()))
    body = []
    fenced = False
    for line in OPERATIONS.read_text().splitlines():
        fenced = fenced != line.startswith("```")
        level = len(line) - len(line.lstrip("#"))
        if not fenced and 1 <= level <= 6 and line[level : level + 1] == " ":
            body.append(
                f'<h{level} id="{html.escape(next(anchors))}">'
                f"{html.escape(line[level + 1 :])}</h{level}>"
            )
        else:
            body.append(f"<p>{html.escape(line)}</p>")
    return ("<!doctype html><title>operations</title>" + "\n".join(body)).encode()


@pytest.fixture(scope="module")
def docs(admin_env: adminenv.Env) -> Iterator[Docs]:
    """The documentation as the runbook base serves it, over HTTPS with the admin's
    certificate (Chromium trusts its CA): /tether/docs/operations.md."""
    page = rendered_operations()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            ok = self.path.split("#")[0] == "/tether/docs/operations.md"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(page if ok else b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", controlplane.free_port()), Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(admin_env.cert_file, admin_env.key_file)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Docs(f"https://127.0.0.1:{server.server_address[1]}/tether")
    finally:
        server.shutdown()
        server.server_close()


class Scenario(NamedTuple):
    env: adminenv.Env
    admin: adminenv.AdminProcess
    all_pages: str  # tokens
    fleet_only: str
    nothing: str
    failing: str  # runtime IDs
    unenrolled: str
    xss: str
    healthy: tuple[str, ...]
    docs: Docs


@pytest.fixture(scope="module")
def scenario(admin_env: adminenv.Env, docs: Docs) -> Iterator[Scenario]:
    env = admin_env
    healthy = tuple(env.runtime(f"healthy-{i:02d}", webhook=20) for i in range(HEALTHY))
    # two refusals (fewer than make it "refusing"): the runtime page links their runbook
    failing = env.runtime("failing", webhook=2, poller=30, lag=0.4, refused={"invalid_json": 2})
    unenrolled = env.runtime("unenrolled", ready=False, webhook=5)
    xss = env.runtime("xss", webhook=6, names=[XSS])
    env.mapping("healthy-00", "Ready")
    env.mapping("healthy-01", "Ready")
    env.mapping(
        "failing",
        "Failed",
        reason="RegistrationFailed",
        message="Director answered 500 three times",
    )
    core: Any = client.CoreV1Api(env.api)
    core.create_namespaced_event(
        env.kcp_ns,
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"failing.{env.suffix}"},
            "involvedObject": {
                "kind": "CompassMapping",
                "name": "failing",
                "namespace": env.kcp_ns,
            },
            "type": "Warning",
            "reason": "RegistrationFailed",
            "message": "registerRuntime: Director answered 500",
            "count": 3,
            "firstTimestamp": adminenv.stamp(adminenv.now()).split(".")[0] + "Z",
            "lastTimestamp": adminenv.stamp(adminenv.now()).split(".")[0] + "Z",
            "source": {"component": "tether-compass"},
        },
    )
    env.deployment("tether-listener", ready=2, replicas=2)
    env.deployment("tether-compass", ready=1)
    env.deployment("tether-enroller", ready=0)
    env.deployment("tether-admin", ready=1)
    ran = adminenv.stamp(adminenv.now())
    env.leader_lease(
        "tether-compass",
        "tether-compass-7d9f-abcde",
        {
            "tether.kyma-project.io/breaker": "open",
            "tether.kyma-project.io/director-errors": json.dumps(
                [
                    {
                        "at": ran,
                        "operation": "registerRuntime",
                        "message": "Director answered 500 three times",
                    }
                ]
            ),
            "tether.kyma-project.io/last-run-at": ran,
            "tether.kyma-project.io/last-run-result": "failed",
            "tether.kyma-project.io/last-run-seconds": "2.4",
        },
    )
    env.leader_lease(
        "tether-enroller",
        "tether-enroller-5c6b-fghij",
        {
            "tether.kyma-project.io/last-run-at": ran,
            "tether.kyma-project.io/last-run-result": "ok",
            "tether.kyma-project.io/last-run-seconds": "0.8",
        },
    )
    tokens = (
        env.operator("browser-all"),
        env.operator("browser-fleet", ["fleet"]),
        env.operator("browser-none", ()),
    )
    admin = adminenv.AdminProcess(
        env, TETHER_ADMIN_PAGE_SIZE="5", TETHER_ADMIN_RUNBOOK_BASE=docs.base
    )
    try:
        yield Scenario(
            env,
            admin,
            *tokens,
            failing=failing,
            unenrolled=unenrolled,
            xss=xss,
            healthy=healthy,
            docs=docs,
        )
    finally:
        admin.stop()


def _trusting_home(d: pathlib.Path, ca_file: pathlib.Path) -> pathlib.Path:
    """A HOME whose NSS database trusts ``ca_file`` as an issuer of server certificates."""
    nss = d / ".pki" / "nssdb"
    nss.mkdir(parents=True)
    subprocess.run(
        ["certutil", "-N", "-d", f"sql:{nss}", "--empty-password"], check=True, capture_output=True
    )
    subprocess.run(
        [
            "certutil",
            "-A",
            "-d",
            f"sql:{nss}",
            "-n",
            "tether-admin-test-ca",
            "-t",
            "C,,",
            "-i",
            str(ca_file),
        ],
        check=True,
        capture_output=True,
    )
    return d


@pytest.fixture(scope="module")
def browser(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    for tool in (CHROMIUM, CHROMEDRIVER, shutil.which("certutil") or "certutil"):
        if not os.access(tool, os.X_OK):
            pytest.fail(f"{tool} is missing: run `make browser` (hack/install-browser.sh)")
    d = tmp_path_factory.mktemp("browser")
    home = _trusting_home(d / "home", scenario.env.ca_file)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    opts.add_argument("--headless=new")
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # Chromium refuses to start as root with it
    opts.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    opts.add_argument(f"--user-data-dir={d / 'profile'}")
    for flag in (
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(
        CHROMEDRIVER, log_output=str(d / "chromedriver.log"), env={**os.environ, "HOME": str(home)}
    )
    old = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"
    try:
        driver = webdriver.Chrome(service=service, options=opts)
    finally:
        if old is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = old
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


# -- helpers -----------------------------------------------------------------------------------


def console(driver: WebDriver) -> list[dict[str, Any]]:
    """The browser console since the last call (SEVERE and WARNING entries)."""
    return [e for e in driver.get_log("browser") if e.get("level") in ("SEVERE", "WARNING")]


def assert_clean_console(driver: WebDriver, *, expected_status: int | None = None) -> None:
    """No SEVERE console entry. The one Chromium writes for a page answered with an error
    status (``expected_status``, e.g. the 403 page itself) is expected."""
    entries = [e for e in console(driver) if e["level"] == "SEVERE"]
    if expected_status is not None:
        marker = f"status of {expected_status}"
        entries = [
            e
            for e in entries
            if not (e.get("source") == "network" and marker in e.get("message", ""))
        ]
    assert entries == [], f"console errors on {driver.current_url}: {entries}"


def visit(driver: WebDriver, s: Scenario, path: str) -> None:
    driver.get(s.admin.url + path)


def heading(driver: WebDriver) -> str:
    return driver.find_element(By.TAG_NAME, "h1").text


def sign_in(driver: WebDriver, s: Scenario, token: str, then: str = "/fleet") -> None:
    """Through the form, as an operator: open the page, be sent to /login, paste, submit."""
    driver.delete_all_cookies()
    visit(driver, s, then)
    WebDriverWait(driver, 10).until(expected_conditions.url_contains("/login"))
    assert driver.title == "Sign in · Tether admin"
    assert driver.find_element(By.NAME, "next").get_attribute("value") == then
    box = driver.find_element(By.ID, "token")
    box.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
    WebDriverWait(driver, 10).until(
        lambda d: urllib.parse.urlsplit(d.current_url).path == urllib.parse.urlsplit(then).path
    )


def shoot(driver: WebDriver, page: str) -> None:
    if os.environ.get("TETHER_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(IMAGES / f"admin-{page}.png"))


def fleet_ids(driver: WebDriver) -> list[str]:
    return [
        str(r.get_attribute("data-runtime"))
        for r in driver.find_elements(By.CSS_SELECTOR, "#fleet tbody tr[data-runtime]")
    ]


def assert_styled(driver: WebDriver) -> None:
    """The stylesheet loaded and applied (the CSP allows it): the header's dark background."""
    bg = driver.find_element(By.TAG_NAME, "header").value_of_css_property("background-color")
    assert bg == "rgba(38, 50, 56, 1)", bg


# -- tests -------------------------------------------------------------------------------------


def test_login_page_form_and_sign_in(browser: WebDriver, scenario: Scenario) -> None:
    visit(browser, scenario, "/fleet?problem=webhook_path_failing")
    assert urllib.parse.urlsplit(browser.current_url).path == "/login"
    assert heading(browser) == "Sign in"
    assert_styled(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "header form.who") == []
    shoot(browser, "login")
    assert_clean_console(browser)
    # the console check is not vacuous: a resource the CSP refuses is reported there
    browser.execute_script(
        "const i = document.createElement('img');"
        "i.src = 'data:image/gif;base64,R0lGODlhAQABAAAAACw=';"
        "document.body.appendChild(i);"
    )
    WebDriverWait(browser, 5).until(
        lambda d: any("Content Security Policy" in e["message"] for e in console(d))
    )
    browser.refresh()
    assert_clean_console(browser)
    browser.find_element(By.ID, "token").send_keys("not-a-token")
    browser.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
    WebDriverWait(browser, 10).until(
        expected_conditions.presence_of_element_located((By.ID, "message"))
    )
    assert "did not accept" in browser.find_element(By.ID, "message").text
    assert_clean_console(browser, expected_status=401)
    sign_in(browser, scenario, scenario.all_pages, "/fleet?problem=webhook_path_failing")
    assert browser.current_url.endswith("/fleet?problem=webhook_path_failing")
    cookie = browser.get_cookie(admin_guard.COOKIE)
    assert cookie is not None
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/" and scenario.all_pages not in cookie["value"]  # a session ID
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: not for scripts
    assert fleet_ids(browser) == [scenario.failing]
    assert_clean_console(browser)


def test_fleet_worst_first_search_and_pages(browser: WebDriver, scenario: Scenario) -> None:
    sign_in(browser, scenario, scenario.all_pages)
    assert browser.title == "Fleet · Tether admin"
    assert heading(browser).startswith("Fleet")
    assert "9 runtimes" in heading(browser)
    assert_styled(browser)
    first = fleet_ids(browser)
    # worst first: not enrolled outweighs every other problem, then the failing webhook path
    # (with its Failed Compass registration); healthy runtimes last
    assert first[:2] == [scenario.unenrolled, scenario.failing], first
    assert len(first) == 5
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-runtime="{scenario.failing}"]')
    assert "bad" in str(row.get_attribute("class"))
    badges = [b.text for b in row.find_elements(By.CSS_SELECTOR, ".badge")]
    assert badges == ["webhook_path_failing", "compass_failed"]
    assert "94%" in row.text  # 30 of 32 records only by the poller
    assert "Page 1 of 2 (9 matching)" in browser.find_element(By.CSS_SELECTOR, "p.pages").text
    shoot(browser, "fleet")
    assert_clean_console(browser)

    browser.find_element(By.CSS_SELECTOR, "p.pages a[rel=next]").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("page=2"))
    second = fleet_ids(browser)
    assert len(second) == 4 and not set(first) & set(second)
    assert set(first + second) == {
        scenario.failing,
        scenario.unenrolled,
        scenario.xss,
        *scenario.healthy,
    }
    assert "Page 2 of 2" in browser.find_element(By.CSS_SELECTOR, "p.pages").text
    assert browser.find_elements(By.CSS_SELECTOR, "p.pages a[rel=next]") == []
    browser.find_element(By.CSS_SELECTOR, "p.pages a[rel=prev]").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("page=1"))
    assert fleet_ids(browser) == first
    assert_clean_console(browser)

    q = browser.find_element(By.NAME, "q")
    q.clear()
    q.send_keys("healthy-0")
    browser.find_element(By.CSS_SELECTOR, "form.search button[type=submit]").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("q=healthy-0"))
    hits = fleet_ids(browser)
    assert len(hits) == 5 and all(h.startswith("rt-healthy-0") for h in hits)
    assert "(6 matching)" in browser.find_element(By.CSS_SELECTOR, "p.pages").text
    assert browser.find_element(By.NAME, "q").get_attribute("value") == "healthy-0"
    browser.find_element(By.CSS_SELECTOR, "p.pages a[rel=next]").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("page=2"))
    assert len(fleet_ids(browser)) == 1  # the search is kept across pages
    assert_clean_console(browser)

    visit(browser, scenario, "/fleet")
    Select(browser.find_element(By.NAME, "problem")).select_by_value("not_enrolled")
    browser.find_element(By.CSS_SELECTOR, "form.search button[type=submit]").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("problem=not_enrolled"))
    assert fleet_ids(browser) == [scenario.unenrolled]
    visit(browser, scenario, "/fleet?q=no-such-runtime")
    assert "No runtime matches." in browser.find_element(By.ID, "fleet").text
    assert_clean_console(browser)


def test_runtime_page_charts_and_facts(browser: WebDriver, scenario: Scenario) -> None:
    sign_in(browser, scenario, scenario.all_pages)
    browser.find_element(By.LINK_TEXT, scenario.failing).click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("/runtimes/"))
    assert browser.title == f"{scenario.failing} · Tether admin"
    assert heading(browser) == f"Runtime {scenario.failing}"
    problems = browser.find_element(By.ID, "problems").text
    assert "webhook_path_failing" in problems and "compass_failed" in problems
    for chart in ("lag-chart", "records-chart"):
        svg = browser.find_element(By.CSS_SELECTOR, f"#{chart} svg")
        assert svg.size["width"] > 100 and svg.size["height"] > 50, svg.size
        lines = browser.find_elements(By.CSS_SELECTOR, f"#{chart} svg polyline")
        assert lines, chart
        assert {line.value_of_css_property("fill") for line in lines} == {"none"}  # lines
    # the poller line is drawn in its colour: the stylesheet reaches the inline SVG
    poller = browser.find_element(By.CSS_SELECTOR, "#records-chart polyline.poller")
    assert poller.value_of_css_property("stroke") == "rgb(217, 48, 37)"
    recent = browser.find_element(By.ID, "recent").text
    assert "team-a/app" in recent and "poller" in recent
    assert "invalid_json" in browser.find_element(By.ID, "refusals").text
    events = browser.find_element(By.ID, "events").text
    assert "RegistrationFailed" in events and "(×3)" in events
    shoot(browser, "runtime")
    assert_clean_console(browser)


def test_record_names_are_shown_as_text(browser: WebDriver, scenario: Scenario) -> None:
    sign_in(browser, scenario, scenario.all_pages, f"/runtimes/{scenario.xss}")
    recent = browser.find_element(By.ID, "recent")
    assert f"team-a/{XSS}" in recent.text
    assert recent.find_elements(By.TAG_NAME, "img") == []
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    with pytest.raises(exceptions.NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when no dialog is open
    assert_clean_console(browser)


def test_compass_page(browser: WebDriver, scenario: Scenario) -> None:
    sign_in(browser, scenario, scenario.all_pages, "/compass")
    assert browser.title == "Compass · Tether admin"
    assert heading(browser) == "Compass"
    breaker = browser.find_element(By.ID, "breaker")
    assert breaker.text == "open" and "bad" in str(breaker.get_attribute("class"))
    errors = browser.find_element(By.ID, "director-errors").text
    assert "registerRuntime" in errors and "Director answered 500 three times" in errors
    rows = browser.find_elements(By.CSS_SELECTOR, "#mappings tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["failing"]
    assert "Failed" in rows[0].text and "RegistrationFailed" in rows[0].text
    assert "Failed: 1, Ready: 2" in browser.find_element(By.ID, "states").text
    assert "active" in str(browser.find_element(By.LINK_TEXT, "Compass").get_attribute("class"))
    shoot(browser, "compass")
    assert_clean_console(browser)


def test_parts_page(browser: WebDriver, scenario: Scenario) -> None:
    sign_in(browser, scenario, scenario.all_pages, "/parts")
    assert browser.title == "Parts · Tether admin"
    assert heading(browser) == "Parts"
    rows = browser.find_elements(By.CSS_SELECTOR, "#parts tr[data-part]")
    names = [r.get_attribute("data-part") for r in rows]
    assert names[0] == "tether-enroller"  # not Available: first
    assert set(names) == {"tether-listener", "tether-compass", "tether-enroller", "tether-admin"}
    enroller = browser.find_element(By.CSS_SELECTOR, 'tr[data-part="tether-enroller"]')
    assert "bad" in str(enroller.get_attribute("class"))
    assert "0/1 (not Available)" in enroller.text and "tether-enroller-5c6b-fghij" in enroller.text
    listener = browser.find_element(By.CSS_SELECTOR, 'tr[data-part="tether-listener"]')
    assert "2/2" in listener.text and "0.1.0" in listener.text
    compass = browser.find_element(By.CSS_SELECTOR, 'tr[data-part="tether-compass"]')
    assert "failed (2.4s)" in compass.text
    shoot(browser, "parts")
    assert_clean_console(browser)


def test_forbidden_pages(browser: WebDriver, scenario: Scenario) -> None:
    """A token allowed only the fleet page sees it and gets the 403 page elsewhere; a token
    with no grant gets the 403 page on every page."""
    sign_in(browser, scenario, scenario.fleet_only)
    assert fleet_ids(browser)[:2] == [scenario.unenrolled, scenario.failing]
    assert_clean_console(browser)
    for path, page in (
        ("/compass", "compass"),
        ("/parts", "parts"),
        (f"/runtimes/{scenario.failing}", "runtime"),
    ):
        visit(browser, scenario, path)
        assert browser.title == "403 forbidden · Tether admin", path
        assert heading(browser) == "403 · forbidden"
        detail = browser.find_element(By.ID, "detail").text
        assert f"may not get adminpages/{page}" in detail
        assert "system:serviceaccount:" in browser.find_element(By.CSS_SELECTOR, ".who").text
        if page == "compass":
            shoot(browser, "forbidden")
        assert_clean_console(browser, expected_status=403)

    # a token with no grant makes no session: the sign-in form says why, the pages ask again
    browser.delete_all_cookies()
    visit(browser, scenario, "/parts")
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("/login"))
    browser.find_element(By.ID, "token").send_keys(scenario.nothing)
    browser.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "message"))
    message = browser.find_element(By.ID, "message").text
    assert "may not get adminpages/parts" in message and "no session was made" in message
    assert browser.get_cookie(admin_guard.COOKIE) is None
    assert_clean_console(browser, expected_status=403)
    visit(browser, scenario, "/fleet")
    assert urllib.parse.urlsplit(browser.current_url).path == "/login"


def test_sign_out_clears_the_cookie(browser: WebDriver, scenario: Scenario) -> None:
    sign_in(browser, scenario, scenario.all_pages, "/parts")
    kept = browser.get_cookie(admin_guard.COOKIE)
    assert kept is not None
    browser.find_element(By.CSS_SELECTOR, "header form.who button[type=submit]").click()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("/login"))
    assert browser.get_cookie(admin_guard.COOKIE) is None
    visit(browser, scenario, "/compass")
    assert urllib.parse.urlsplit(browser.current_url).path == "/login"
    assert browser.find_element(By.NAME, "next").get_attribute("value") == "/compass"
    # the session ended on the server: the old cookie, put back, is worth nothing
    browser.add_cookie(
        {
            "name": admin_guard.COOKIE,
            "value": kept["value"],
            "path": "/",
            "secure": True,
            "httpOnly": True,
            "sameSite": "Strict",
        }
    )
    visit(browser, scenario, "/compass")
    assert urllib.parse.urlsplit(browser.current_url).path == "/login"
    assert_clean_console(browser)


def test_a_refusal_leads_to_its_runbook(browser: WebDriver, scenario: Scenario) -> None:
    """An operator sees a refusal on the runtime page, with what was refused and when, and
    follows its reason to the runbook section (issue 28, item 6)."""
    sign_in(browser, scenario, scenario.all_pages, f"/runtimes/{scenario.failing}")
    row = browser.find_element(By.CSS_SELECTOR, '#refusals tr[data-reason="invalid_json"]')
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:3] == ["invalid_json", "2", "(the runtime's request; no object read)"], cells
    assert cells[3].endswith("Z)") and "ago" in cells[3], cells  # when: ago (time)
    link = row.find_element(By.CSS_SELECTOR, "a.runbook")
    href = str(link.get_attribute("href"))
    assert href == f"{scenario.docs.base}/docs/operations.md#refusal-invalid_json"
    anchor = urllib.parse.urlsplit(href).fragment
    assert anchor in github_anchors(OPERATIONS.read_text())  # a heading GitHub renders so
    assert_clean_console(browser)
    link.click()
    WebDriverWait(browser, 10).until(expected_conditions.url_to_be(href))
    target = browser.find_element(By.ID, anchor)
    assert target.tag_name == "h3" and target.text == "Refusal `invalid_json`"
    # the browser scrolled to the section: its heading is at the top of the window
    top = browser.execute_script("return arguments[0].getBoundingClientRect().top", target)
    assert -1 < top < 50, top  # sub-pixel: Chromium reports e.g. -0.125
    section = browser.execute_script(
        "let t = [], e = arguments[0].nextElementSibling;"
        "while (e && e.tagName === 'P') { t.push(e.textContent); e = e.nextElementSibling; }"
        "return t.join('\\n');",
        target,
    )
    assert "**Do:**" in section and "**Check:**" in section
    # the docs stand-in serves no favicon: its 404 is not the admin's, drop it from the log
    assert all("favicon.ico" in e["message"] for e in console(browser) if e["level"] == "SEVERE")
    browser.back()
    WebDriverWait(browser, 10).until(expected_conditions.url_contains("/runtimes/"))
    problem = browser.find_element(By.CSS_SELECTOR, "#problems a.runbook")
    assert (
        str(problem.get_attribute("href"))
        == f"{scenario.docs.base}/docs/operations.md#problem-webhook_path_failing"
    )


def test_a_changes_trace_id_is_shown_beside_its_record(
    browser: WebDriver, scenario: Scenario
) -> None:
    """The runtime page shows the trace ID the listener wrote with a recent record into the
    RuntimeDelivery (tests/webhook/test_trace_e2e.py shows that it is the one the listener
    logged and stored on the record), so an operator can search the logs and spans for it."""
    trace = "0af7651916cd43dd8448eb211c80319c"
    env = scenario.env
    objects: Any = client.CustomObjectsApi(env.api)
    res, name = apitypes.RUNTIME_DELIVERIES, heartbeat.lease_name(scenario.xss)
    obj = objects.get_namespaced_custom_object(res.group, res.version, env.kcp_ns, res.plural, name)
    d = delivery.Delta()
    at = adminenv.now()
    d.record(at, "webhook", at, "persisted", "team-a", "traced-cm", trace)
    obj["status"] = delivery.merge(obj.get("status"), d, scenario.xss, at)
    objects.replace_namespaced_custom_object_status(
        res.group, res.version, env.kcp_ns, res.plural, name, obj
    )
    sign_in(browser, scenario, scenario.all_pages, f"/runtimes/{scenario.xss}")

    def traced_row(driver: WebDriver) -> Any:
        driver.refresh()  # the admin lists the KCP in the background, about every second
        rows = [
            r
            for r in driver.find_elements(By.CSS_SELECTOR, "#recent tr")
            if "team-a/traced-cm" in r.text
        ]
        return rows[0] if rows else False

    row = WebDriverWait(browser, 30, poll_frequency=1).until(traced_row)
    assert row.find_element(By.CSS_SELECTOR, "td.trace").text == trace
    assert_clean_console(browser)
