"""What program goodput returns (:class:`ProgramGoodput`): the work a job did, its model
FLOPs utilisation and the three goodputs of ML Productivity Goodput
(docs/program-goodput.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["PEAK_FLOPS", "PROGRAM_FIGURES", "AttemptWork", "ProgramGoodput"]

#: The figures of a :class:`ProgramGoodput` every view shows (the CSV table, ``jobs``,
#: ``compare``, each exporter's gauges), in order: its attribute names.
PROGRAM_FIGURES: Final = (
    "tokens_per_second",
    "productive_tokens_per_second",
    "mfu_productive",
    "scheduling_goodput",
    "runtime_goodput",
    "program_goodput",
    "mpg",
)

#: Peak dense bf16 FLOP/s of one device, from the vendors' data sheets (sparsity not
#: counted: the data sheets' "with sparsity" figures are twice these). Matched against a
#: device name (``torch.cuda.get_device_name()``, ``jax.devices()[0].device_kind`` or the
#: ``device`` of a ``model`` event) by the words of the first column, all of which must
#: occur in the lower-cased name; the first row that matches wins.
#:
#: - NVIDIA A100 Tensor Core GPU data sheet: BF16 312 TFLOPS (SXM and PCIe).
#: - NVIDIA H100 Tensor Core GPU data sheet: BF16 1,979 TFLOPS (SXM) / 1,513 (PCIe) with
#:   sparsity, so 989.5 / 756.5 dense.
#: - NVIDIA H200 Tensor Core GPU data sheet: BF16 1,979 TFLOPS (SXM) with sparsity: 989.5.
#: - NVIDIA HGX B200 data sheet: BF16 36 PFLOPS with sparsity for 8 GPUs: 2.25 P each dense.
#: - AMD Instinct MI300X data sheet: BF16 1,307.4 TFLOPS dense.
#: - Google Cloud TPU documentation (system architecture pages): bf16 peak per chip
#:   TPU v4 275, v5e 197, v5p 459, v6e (Trillium) 918 TFLOPS.
PEAK_FLOPS: Final[tuple[tuple[tuple[str, ...], str, float], ...]] = (
    (("a100",), "NVIDIA A100", 312e12),
    (("h100", "pcie"), "NVIDIA H100 PCIe", 756.5e12),
    (("h100",), "NVIDIA H100 SXM", 989.5e12),
    (("h200",), "NVIDIA H200 SXM", 989.5e12),
    (("b200",), "NVIDIA B200", 2250e12),
    (("mi300x",), "AMD Instinct MI300X", 1307.4e12),
    (("tpu", "v4"), "TPU v4", 275e12),
    (("tpu", "v5e"), "TPU v5e", 197e12),
    (("tpu", "v5", "lite"), "TPU v5e", 197e12),
    (("tpu", "v5p"), "TPU v5p", 459e12),
    (("tpu", "v6e"), "TPU v6e", 918e12),
    (("tpu", "v6", "lite"), "TPU v6e", 918e12),
    (("trillium",), "TPU v6e", 918e12),
)


def table_peak(device: str) -> tuple[str, float] | None:
    """``(the device's name in the table, its peak FLOP/s)`` for a device name, else None."""
    name = device.lower()
    for words, label, peak in PEAK_FLOPS:
        if all(w in name for w in words):
            return label, peak
    return None


@dataclass(frozen=True)
class AttemptWork:
    """The work of one attempt: what its steps recorded, over its wall-clock span."""

    id: str | int
    tokens: int
    samples: int
    seconds: float
    tokens_per_second: float | None
    samples_per_second: float | None


@dataclass(frozen=True)
class ProgramGoodput:
    """Tokens, samples, FLOPs, MFU and ML Productivity Goodput of a job
    (docs/program-goodput.md). A figure that cannot be computed is ``None`` and
    ``absent`` says why (``{"program_goodput": "no FLOPs per token: ..."}``).

    ``mpg == scheduling_goodput * runtime_goodput * program_goodput`` (to rounding), and
    ``scheduling_goodput * runtime_goodput`` is the report's goodput.
    """

    tokens: int
    samples: int
    kept_tokens: int
    kept_samples: int
    tokens_per_second: float | None  # every token over the job's wall-clock time
    samples_per_second: float | None
    productive_tokens_per_second: float | None  # kept tokens over kept step time
    productive_samples_per_second: float | None
    attempts: list[AttemptWork]
    flops_per_token: float | None
    flops_source: str | None  # "recorded" | "dense_transformer" | None
    devices: int | None
    peak_flops: float | None  # one device's
    peak_source: str | None  # "given" | "recorded" | "table:<device>" | None
    mfu_productive: float | None  # kept FLOPs over kept step time (productive + slowdown)
    mfu_job: float | None  # kept FLOPs over the job's whole time: equals mpg
    scheduling_goodput: float | None
    runtime_goodput: float | None
    program_goodput: float | None
    mpg: float | None
    absent: dict[str, str] = field(default_factory=dict)

    def figure(self, name: str) -> float | None:
        """The value of a figure (an attribute, e.g. of :data:`PROGRAM_FIGURES`)."""
        value = getattr(self, name)
        return None if value is None else float(value)

    def reason(self, name: str) -> str:
        """Why the figure ``name`` is absent: program goodput's reason for what needs it
        (MFU, PG, MPG: the FLOPs, the peak or the devices missing), else its own."""
        if name in ("scheduling_goodput", "runtime_goodput"):
            return self.absent.get("runtime_goodput", "not computed")
        if name.endswith("_per_second"):
            return self.absent.get(name, "no time to divide by")
        if name != "program_goodput" and "program_goodput" in self.absent:
            return self.absent["program_goodput"]
        return self.absent.get(name) or self.absent.get("program_goodput", "not computed")

    def figures(self) -> list[tuple[str, float | None, str]]:
        """``(name, value, why absent or "")`` of each of :data:`PROGRAM_FIGURES`."""
        out = []
        for name in PROGRAM_FIGURES:
            value = self.figure(name)
            out.append((name, value, "" if value is not None else self.reason(name)))
        return out
