"""The console's browser: Debian's chromium and its chromedriver (installed with apt-get when missing,
:mod:`tests.support.apt`), one headless browser per test module; and the console of a test's cluster."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from jobs.console.demo import chromium_driver
from tests.support import apt

#: Debian's packages of the browser and its WebDriver (chromedriver).
APT_PACKAGES = ("chromium", "chromium-driver")


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """``(chromium, chromedriver)`` paths; apt-get installs them when missing (:func:`tests.support.apt.require`: skipped in one line where that cannot run, failed where it failed)."""
    apt.require(
        APT_PACKAGES,
        "chromium and chromedriver (the console's browser tests)",
        lambda: shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
    )
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert browser is not None and driver is not None
    return browser, driver


@pytest.fixture(scope="module")
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    driver = chromium_driver(*chromium)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()
