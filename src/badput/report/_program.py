"""The table's program goodput section: tokens, MFU and ML Productivity Goodput
(docs/program-goodput.md). Shown only when the log records step work or a model."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from badput.engine import ProgramGoodput, Report
from badput.report._format import format_percent

__all__ = ["program_line", "program_table"]


def _rate(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:,.1f} {unit}/s"


def _share(p: ProgramGoodput, name: str) -> Text:
    value = getattr(p, name)
    if value is not None:
        return Text(format_percent(value))
    why = p.absent.get(name) or p.absent.get("program_goodput", "not computed")
    return Text(f"- ({why})", style="yellow")


def program_table(report: Report) -> Table | None:
    """The section of ``report.program``, or None when it has none."""
    p = report.program
    if p is None:
        return None
    table = Table(title="Program goodput", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("figure")
    table.add_column("value", overflow="fold")
    table.add_row("tokens (kept)", f"{p.tokens:,} ({p.kept_tokens:,})")
    table.add_row("samples (kept)", f"{p.samples:,} ({p.kept_samples:,})")
    table.add_row("tokens/s: job, kept steps", f"{_rate(p.tokens_per_second, 'tok')}, "
                  f"{_rate(p.productive_tokens_per_second, 'tok')}")  # fmt: skip
    if p.flops_per_token is not None:
        table.add_row("FLOPs per token", f"{p.flops_per_token:.4g} ({p.flops_source})")
    if p.peak_flops is not None and p.devices is not None:
        table.add_row(
            "devices x peak", f"{p.devices} x {p.peak_flops:.4g} FLOP/s ({p.peak_source})"
        )
    table.add_row("MFU: kept steps", _share(p, "mfu_productive"))
    table.add_row("MFU: whole job", _share(p, "mfu_job"))
    table.add_row("scheduling goodput (SG)", _share(p, "scheduling_goodput"))
    table.add_row("runtime goodput (RG)", _share(p, "runtime_goodput"))
    table.add_row("program goodput (PG)", _share(p, "program_goodput"))
    table.add_row(Text("MPG = SG x RG x PG", style="bold"), _share(p, "mpg"))
    return table


def program_line(report: Report) -> str | None:
    """``MFU 40.4%, MPG 23.8%, 52,428.8 tok/s`` (the watch view and status lines), or
    ``MFU - (why)``; None when the log records no work."""
    p = report.program
    if p is None:
        return None
    rate = p.productive_tokens_per_second
    tokens = "" if rate is None or rate == 0 else f", {rate:,.1f} tok/s"
    if p.mfu_productive is None:
        return f"MFU - ({p.reason('mfu_productive')}){tokens}"
    mpg = "-" if p.mpg is None else format_percent(p.mpg)
    return f"MFU {format_percent(p.mfu_productive)}, MPG {mpg}{tokens}"
