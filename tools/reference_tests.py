#!/usr/bin/env python3
"""Run ml-goodput-measurement's own test suite against badput's drop-in.

Usage (from the project root, after ``make test`` has built ``.venv``; needs PyPI)::

    python3 tools/reference_tests.py                  # every test file of the 0.2.3 wheel
    python3 tools/reference_tests.py -k interval      # pytest's -k, passed through
    python3 tools/reference_tests.py --keep /tmp/mgm-tests   # keep the rewritten tests

What it does:

1. Creates a virtual environment of its own (``--venv``, default ``.reference-tests-venv``)
   holding only the library's test dependencies (``absl-py``, ``mock``) from PyPI, and a
   ``.pth`` file that puts the project's ``.venv`` (badput and its extras) on its path:
   nothing is installed into the project's venv, and ml-goodput-measurement itself is
   never installed anywhere.
2. Downloads the published ``ml-goodput-measurement==0.2.3`` wheel (``pip download
   --no-deps``) and extracts its ``tests/`` into a temporary directory. Nothing of the
   library is committed to this project.
3. Rewrites only the tests' imports: ``ml_goodput_measurement.src`` becomes
   ``badput.compat.ml_goodput_measurement`` (in ``import`` lines and in ``mock.patch``
   target strings), and reads of the library's private caches become the public result
   they cache (``calculator._goodput_cache.get_goodput_info()`` -> a ``GoodputInfo`` built
   from ``get_job_goodput_details()``; ``cache._goodput_info`` -> ``get_goodput_info()``,
   and the same for ``_step_info``, ``_job_start_time``, ``_job_end_time``).
4. Leaves out (``--deselect``) every test that still reads or patches a private name of
   the library (a ``_name`` attribute of the library's objects or modules, other than its
   payload-key constants such as ``goodput._JOB_NAME``), and every test of the library's
   private Cloud Logging client (``cloud_logging_test.py``). Each is listed with the
   private names it uses.
5. Runs the rest with pytest, each test on a memory store of its own (``BADPUT_STORE``),
   and prints passes per file and the skipped tests with their reasons.

Only the standard library is used here; exit status 0 when every selected test passed.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REFERENCE_PACKAGE = "ml-goodput-measurement"
REFERENCE_VERSION = "0.2.3"
TEST_DEPENDENCIES = ("absl-py==2.1.0", "mock==5.1.0")
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = ROOT / ".reference-tests-venv"
PROJECT_VENV = ROOT / ".venv"
SOURCE_PACKAGE = "ml_goodput_measurement.src"
TARGET_PACKAGE = "badput.compat.ml_goodput_measurement"

# Whole files that test the library's private Cloud Logging client (``_CloudLogger``).
SKIPPED_FILES = {
    "cloud_logging_test.py": "tests the library's private Cloud Logging client (_CloudLogger)",
}

# Tests that use only public API and fail on purpose: the drop-in departs from the library
# there (docs/compat.md, "Where badput reports a different number"). They run; a failure
# of one of these is reported as the documented difference, not as a failure. None today:
# every test that uses only public API passes.
DOCUMENTED_DIFFERENCES: dict[str, str] = {}

# Private reads that have a public equivalent: (pattern, replacement).
PUBLIC_READS: tuple[tuple[str, str], ...] = (
    (r"(\w+(?:\.\w+)*)\._goodput_cache\.get_goodput_info\(\)", r"_public_goodput_info(\1)"),
    (r"\._goodput_info\b", ".get_goodput_info()"),
    (r"\._step_info\b", ".get_step_info()"),
    (r"\._job_start_time\b", ".get_job_start_time()"),
    (r"\._job_end_time\b", ".get_job_end_time()"),
)

# The library's payload-key constants (goodput._JOB_NAME, ...): the log format, which the
# drop-in reproduces; not private state.
_PAYLOAD_KEY = re.compile(r"_[A-Z][A-Z0-9_]*$")

CONFTEST = '''"""Written by tools/reference_tests.py: one memory store per test."""
import datetime
import uuid

import pytest

from absl import flags

from badput.compat.ml_goodput_measurement import goodput_utils

# absltest's create_tempdir reads --test_tmpdir: absl's own runner parses its flags,
# pytest does not.
flags.FLAGS.mark_as_parsed()


@pytest.fixture(autouse=True)
def _own_store(monkeypatch):
    monkeypatch.setenv("BADPUT_STORE", f"memory://reference-tests-{uuid.uuid4().hex}")


def _public_goodput_info(calculator):
    """The calculator's last result, read from its public get_job_goodput_details()."""
    details = calculator.get_job_goodput_details()
    return goodput_utils.GoodputInfo(
        total_productive_time=details["goodput_time"][goodput_utils.GoodputType.TOTAL],
        total_elapsed_time=details["total_elapsed_time"],
        total_unproductive_time=details["badput_time"],
        max_productive_step=details["max_productive_step"],
        number_of_disruptions=details["disruption_count"],
    )


import builtins  # the rewritten tests call it by name

builtins._public_goodput_info = _public_goodput_info
'''


@dataclass
class Rewritten:
    """One test file after the rewrite, and the tests it leaves out."""

    name: str
    text: str
    deselected: dict[str, str] = field(default_factory=dict)  # node id -> reason


def rewrite(name: str, source: str) -> Rewritten:
    """Rewrite one test file's imports and private cache reads; find private uses."""
    text = source.replace(SOURCE_PACKAGE, TARGET_PACKAGE)
    for pattern, replacement in PUBLIC_READS:
        text = re.sub(pattern, replacement, text)
    out = Rewritten(name, text)
    tree = ast.parse(text)
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = {
            f.name: f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for method_name, func in methods.items():
            if not method_name.startswith("test"):
                continue
            private = sorted(_private_uses(func, methods, set()))
            if private:
                node = f"{name}::{cls.name}::{method_name}"
                out.deselected[node] = "reads private state: " + ", ".join(private)
    return out


def _private_uses(
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
    seen: set[str],
) -> set[str]:
    """Private names of the library a test (and the helpers it calls) touches."""
    found: set[str] = set()
    seen.add(func.name)
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if node.attr.startswith("__") or _PAYLOAD_KEY.match(node.attr):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                helper = methods.get(node.attr)  # the test's own helper: look inside it
                if helper is not None and node.attr not in seen:
                    found |= _private_uses(helper, methods, seen)
                continue
            found.add(node.attr)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(TARGET_PACKAGE)
        ):
            found |= {p for p in node.value.split(".") if p.startswith("_")}
    return found


# --------------------------------------------------------------------------- running


def _site_packages(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def ensure_venv(venv: Path) -> Path:
    """The tool's own venv: the library's test dependencies, the project's venv on path."""
    project_python = PROJECT_VENV / "bin" / "python"
    if not project_python.exists():
        sys.exit(f"{project_python} not found: run `make test` first (it builds .venv)")
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv}", file=sys.stderr)
        subprocess.run([str(project_python), "-m", "venv", "--without-pip", str(venv)], check=True)
        # pip of the project's venv installs into this venv (--python, pip >= 22.3).
    subprocess.run(
        [
            str(project_python),
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            *list(TEST_DEPENDENCIES),
        ],
        check=True,
    )
    pth = Path(_site_packages(python)) / "badput-project-venv.pth"
    # addsitedir, not a bare path: the project's own .pth files (its editable install)
    # must be processed too.
    pth.write_text(f"import site; site.addsitedir({_site_packages(project_python)!r})\n")
    return python


def fetch_tests(venv: Path, dest: Path) -> Path:
    """Download the published wheel and extract its tests into ``dest``."""
    wheels = venv / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    spec = f"{REFERENCE_PACKAGE}=={REFERENCE_VERSION}"
    pip = [str(PROJECT_VENV / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "download", "--quiet", "--no-deps", spec, "-d", str(wheels)], check=True)
    wheel = next(wheels.glob(f"ml_goodput_measurement-{REFERENCE_VERSION}-*.whl"))
    tests = dest / "tests"
    tests.mkdir(parents=True)
    prefix = "ml_goodput_measurement/tests/"
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.filename.startswith(prefix) and info.filename.endswith(".py"):
                (tests / info.filename[len(prefix) :]).write_bytes(zf.read(info))
    return tests


def prepare(tests: Path) -> dict[str, str]:
    """Rewrite every test file in place; return the deselected node ids with reasons."""
    deselected: dict[str, str] = {}
    (tests.parent / "conftest.py").write_text(CONFTEST)
    for path in sorted(tests.glob("*_test.py")):
        if path.name in SKIPPED_FILES:
            deselected[path.name] = SKIPPED_FILES[path.name]
            path.unlink()
            continue
        result = rewrite(path.name, path.read_text())
        path.write_text(result.text)
        deselected.update({f"tests/{node}": reason for node, reason in result.deselected.items()})
    return deselected


def run(python: Path, tests: Path, deselected: dict[str, str], extra: list[str]) -> int:
    junit = tests.parent / "junit.xml"
    cmd = [
        str(python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tests.parent),
    ]
    cmd += ["-o", "addopts=", "-o", "timeout=300", f"--junitxml={junit}", "tests"]
    for node in deselected:
        if "::" in node:
            cmd += ["--deselect", node]
    cmd += extra
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BADPUT_STORE")}
    env["TZ"] = "UTC"
    proc = subprocess.run(cmd, cwd=tests.parent, env=env, check=False)
    unexpected = report(junit, deselected)
    if proc.returncode not in (0, 1):  # 1: tests failed, counted above
        return proc.returncode
    return 1 if unexpected else 0


def report(junit: Path, deselected: dict[str, str]) -> int:
    """Print passes per file, the failures and the skipped tests; return the number of
    failures other than the documented differences."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # file -> [passed, run]
    failures: list[str] = []
    if junit.exists():
        for case in ET.parse(junit).iter("testcase"):
            parts = case.get("classname", "").split(".")
            name = (parts[-2] if len(parts) >= 2 else case.get("name", "?")) + ".py"
            bad = case.find("failure") is not None or case.find("error") is not None
            skipped = case.find("skipped") is not None
            counts[name][1] += 0 if skipped else 1
            counts[name][0] += 0 if (bad or skipped) else 1
            if bad:
                cls = parts[-1] if parts else "?"
                failures.append(f"{name}::{cls}::{case.get('name')}")
    skipped_per_file: dict[str, int] = defaultdict(int)
    for node in deselected:
        skipped_per_file[node.split("::")[0].removeprefix("tests/")] += 1
    print(f"\nml-goodput-measurement {REFERENCE_VERSION} tests against {TARGET_PACKAGE}")
    files = sorted(set(counts) | set(skipped_per_file))
    width = max(len(f) for f in files) if files else 10
    total_pass = total_run = total_skip = 0
    for f in files:
        passed, ran = counts.get(f, [0, 0])
        skip = skipped_per_file.get(f, 0)
        whole = f in SKIPPED_FILES
        total_pass, total_run, total_skip = total_pass + passed, total_run + ran, total_skip + skip
        note = "  (whole file skipped)" if whole else ""
        print(f"  {f:<{width}}  {passed:3d} / {ran:3d} passed, {skip:3d} skipped{note}")
    print(f"  {'total':<{width}}  {total_pass:3d} / {total_run:3d} passed, {total_skip:3d} skipped")
    documented = [f for f in failures if f in DOCUMENTED_DIFFERENCES]
    unexpected = [f for f in failures if f not in DOCUMENTED_DIFFERENCES]
    if documented:
        print("\nfailed as documented (a deliberate difference):")
        for f in documented:
            print(f"  {f}: {DOCUMENTED_DIFFERENCES[f]}")
    if unexpected:
        print("\nfailed:")
        for f in unexpected:
            print(f"  {f}")
    print("\nskipped (private state of the library):")
    for node, reason in sorted(deselected.items()):
        print(f"  {node.removeprefix('tests/')}: {reason}")
    return len(unexpected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the tool's venv")
    parser.add_argument("--keep", type=Path, help="write the rewritten tests here and keep them")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (e.g. -k NAME -x)")
    args = parser.parse_args(argv)
    python = ensure_venv(args.venv.resolve())
    if args.keep:
        if args.keep.exists():
            shutil.rmtree(args.keep)
        args.keep.mkdir(parents=True)
        tests = fetch_tests(args.venv.resolve(), args.keep)
        return run(python, tests, prepare(tests), args.pytest_args)
    with tempfile.TemporaryDirectory(prefix="mgm-tests-") as tmp:
        tests = fetch_tests(args.venv.resolve(), Path(tmp))
        return run(python, tests, prepare(tests), args.pytest_args)


if __name__ == "__main__":
    sys.exit(main())
