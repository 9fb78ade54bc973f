"""The console's browser: Debian's chromium and its chromedriver (installed with apt-get when missing, as the
suite gets kcat), one headless browser per test module; and the console of a test's cluster."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from jobs.console.demo import chromium_driver

#: Debian's packages of the browser and its WebDriver (chromedriver).
APT_PACKAGES = ("chromium", "chromium-driver")


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """``(chromium, chromedriver)`` paths; apt-get installs them when missing, else the test fails in one line."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        detail = "apt-get not found"
        if shutil.which("apt-get"):
            subprocess.run(["apt-get", "update"], capture_output=True, timeout=300)
            done = subprocess.run(
                ["apt-get", "install", "-y", *APT_PACKAGES], capture_output=True, text=True, timeout=600
            )
            detail = f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
        browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
        if browser is None or driver is None:
            pytest.fail(
                f"the console's browser tests need chromium and chromedriver; apt-get install -y "
                f"{' '.join(APT_PACKAGES)} failed ({detail})",
                pytrace=False,
            )
    return browser, driver


@pytest.fixture(scope="module")
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    driver = chromium_driver(*chromium)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
