"""A real headless Chromium for tests (Debian's chromium + chromium-driver, through selenium).

``browser()`` installs the two Debian packages with apt-get when they are missing
(the machine is root and reaches Debian's mirror), and skips the test with the
reason only when that is impossible. The browser runs with the network closed
off (no background networking, no component updates) and a fresh profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1800",
)


def ensure_debian(packages: list[str], paths: list[str]) -> str | None:
    """Install Debian ``packages`` unless every file of ``paths`` exists; the reason they
    could not be had, or None."""
    if all(os.path.exists(p) for p in paths):
        return None
    apt = shutil.which("apt-get")
    if apt is None:
        return f"missing {', '.join(paths)} and no apt-get to install {' '.join(packages)}"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return f"{' '.join(packages)} not installed and installing needs root (apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", *packages]):
        done = subprocess.run(
            cmd, check=False, env=env, capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            return f"apt-get could not install {' '.join(packages)}: {done.stderr.strip()[-300:]}"
    if not all(os.path.exists(p) for p in paths):
        return f"apt-get ran but {', '.join(p for p in paths if not os.path.exists(p))} is missing"
    return None


def ensure_chromium() -> str | None:
    """Install chromium and its driver when missing; the reason they are not there, or None."""
    return ensure_debian(["chromium", "chromium-driver"], [CHROMIUM, CHROMEDRIVER])


@contextmanager
def browser() -> Iterator[Any]:
    """A selenium Chrome driver on Debian's headless Chromium, with a fresh profile."""
    reason = ensure_chromium()
    if reason is not None:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="badput-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver: Any) -> list[str]:
    """Messages the page logged at error level (uncaught exceptions, CSP refusals...)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
