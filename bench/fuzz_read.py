"""The long read-path fuzzer: N mutated real logs, each reported as ``badput report`` does.

    python bench/fuzz_read.py [--cases 10000] [--seed 1] [--timeout 20] [--cli-every 100]
                              [--lean-everywhere]

Each case (tests/_log_fuzz.py) is one or two real logs, each damaged by 1-4 random
mutations (byte flips, truncation, lost/duplicated/swapped lines, values of the
wrong type, huge and non-finite numbers, nesting up to 50,000 deep, bad encodings,
NUL-filled tails, lines of up to 3 MB, FIFOs named ``*.jsonl``), written to a store
and reported in-process (``analyze`` + table + JSON) under a per-case time limit.
Every ``--cli-every``-th case is also run through the real ``badput report`` command
in a fresh process. Counted:

- traceback: an exception other than a one-line usage error escaped;
- abort: the whole report was refused (``ValueError``/``OSError``, exit status 2);
- hang: the case ran past ``--timeout`` seconds;
- unnamed: a bad line, torn line or FIFO that no diagnostic names with file:line;

and the peak memory (RSS) of this process and of the CLI children. All four counts
must be 0 and the peak under 2 GB.

``--lean-everywhere``: every block of plain lines the engine reads is decoded lean
(``events.LeanEvent``; by default only blocks of 64 KB or more are, and the fuzzer's logs
are smaller), and each case is reported a second time with no block decoded lean:
``lean_mismatch`` counts the cases whose two reports differ (it must be 0).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _log_fuzz import JOB, Case, check_case, make_case, write_case
from badput.analysis import analyze
from badput.formats import codec
from badput.report import to_json


class CaseTimeoutError(Exception):
    """A case ran past its time limit."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise CaseTimeoutError


def run_cli(case: Case, timeout: float) -> str | None:
    """``badput report`` on the case in a fresh process; what went wrong, or None."""
    badput_cli = Path(sys.executable).with_name("badput")
    with tempfile.TemporaryDirectory() as tmp:
        write_case(case, Path(tmp))
        try:
            out = subprocess.run(
                [str(badput_cli), "report", tmp, "--job", JOB],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env={"COLUMNS": "100", "PATH": ""},
            )
        except subprocess.TimeoutExpired:
            return "hang"
    if "Traceback" in out.stderr:
        return "traceback"
    if out.returncode != 0:
        return "abort"
    return None


def _same_report_lean_or_not(case: Case) -> bool:
    """Whether the case's report is the same with its blocks decoded lean and in full."""
    with tempfile.TemporaryDirectory() as tmp:
        write_case(case, Path(tmp))
        lean = to_json(analyze(tmp, JOB))
        real = codec._decode_lean
        codec._decode_lean = lambda *args: None  # type: ignore[assignment]
        try:
            full = to_json(analyze(tmp, JOB))
        finally:
            codec._decode_lean = real
    return lean == full


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--cli-every", type=int, default=100)
    parser.add_argument("--lean-everywhere", action="store_true")
    args = parser.parse_args()
    if args.lean_everywhere:
        codec._VECTOR_CHECK_BYTES = 0  # type: ignore[misc]
        codec._LEAN_NEW_BYTES = 0  # type: ignore[misc]

    signal.signal(signal.SIGALRM, _alarm)
    counts: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    mutations: Counter[str] = Counter()
    examples: list[str] = []
    slowest = 0.0
    t_start = time.perf_counter()
    for i in range(args.cases):
        rnd = random.Random(f"{args.seed}-{i}")
        case = make_case(rnd)
        mutations.update(case.mutations)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
            try:
                problems = check_case(case, Path(tmp), seen)
            except CaseTimeoutError:
                counts["hang"] += 1
                examples.append(f"case {i}: hang ({case.mutations})")
                continue
            except (ValueError, OSError) as exc:
                counts["abort"] += 1
                examples.append(f"case {i}: abort {exc!r} ({case.mutations})")
                continue
            except Exception:
                counts["traceback"] += 1
                examples.append(f"case {i}: {traceback.format_exc()} ({case.mutations})")
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.perf_counter() - t0)
        if problems:
            counts["unnamed"] += 1
            examples.append(f"case {i}: {problems[:3]} ({case.mutations})")
        if args.lean_everywhere and not _same_report_lean_or_not(case):
            counts["lean_mismatch"] += 1
            examples.append(f"case {i}: lean and full decodes disagree ({case.mutations})")
        if args.cli_every and i % args.cli_every == 0:
            counts["cli_cases"] += 1
            wrong = run_cli(case, args.timeout)
            if wrong is not None:
                counts[f"cli_{wrong}"] += 1
                examples.append(f"case {i}: badput report: {wrong} ({case.mutations})")
        if (i + 1) % 1000 == 0:
            print(f"{i + 1:,} cases, {dict(counts)}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t_start
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    summary = {
        "cases": args.cases,
        "seed": args.seed,
        "tracebacks": counts["traceback"] + counts["cli_traceback"],
        "aborts": counts["abort"] + counts["cli_abort"],
        "hangs": counts["hang"] + counts["cli_hang"],
        "unnamed_bad_lines": counts["unnamed"],
        "lean_mismatch": counts["lean_mismatch"] if args.lean_everywhere else None,
        "cli_cases": counts["cli_cases"],
        "wall_seconds": round(wall, 1),
        "slowest_case_seconds": round(slowest, 2),
        "peak_rss_mb": round(peak_self),
        "peak_rss_cli_mb": round(peak_children),
        "diagnostics_seen": dict(seen.most_common()),
        "mutations_applied": dict(mutations.most_common()),
    }
    print(json.dumps(summary, indent=2))
    for example in examples[:10]:
        print(example, file=sys.stderr)
    bad = summary["tracebacks"] or summary["aborts"] or summary["hangs"] or counts["unnamed"]
    bad = bad or counts["lean_mismatch"]
    return 1 if bad or peak_self > 2048 else 0


if __name__ == "__main__":
    sys.exit(main())
