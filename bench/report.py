"""Figures, and the Markdown and JSON they are written as."""

from __future__ import annotations

import json
import operator
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_OPS = {">=": operator.ge, "<=": operator.le}
# Other jobs using more than this many cores during a measurement make it unreliable.
BUSY = 0.15


@dataclass
class Figure:
    name: str
    unit: str
    value: float | None = None  # Coffer's median
    spread: tuple[float, float] | None = None  # Coffer's min and max over the repetitions
    reference: float | None = None  # the reference's median, where there is one
    reference_spread: tuple[float, float] | None = None
    reference_name: str | None = None
    goal: str | None = None  # "ratio >= 0.5", "ratio <= 5" or "value <= 25"
    ratio: float | None = None
    met: bool | None = None
    client: str = ""
    client_cpu: float | None = None  # cores the load generator used (median), against Coffer
    reference_client_cpu: float | None = None  # the same, against the reference
    server_cpu: dict[str, float] = field(default_factory=dict)  # cores per Coffer process (median)
    reference_server_cpu: float | None = None
    others_cpu: float | None = None  # most cores other jobs on the machine used in any repetition
    samples: list[float] = field(default_factory=list)
    reference_samples: list[float] = field(default_factory=list)
    note: str = ""
    error: str | None = None
    # Latencies without a goal on the ratio: the ratio is then reference ÷ Coffer. Costs with
    # one (CPU per request, p99 "≤ 5× the minimal route's") leave it False: Coffer ÷ reference.
    lower_is_better: bool = False
    derived: bool = False  # another view of a measurement already in the details table

    def finish(self) -> Figure:
        """Medians, spreads, the ratio to the reference, and whether the goal is met."""
        if self.samples:
            self.value = statistics.median(self.samples)
            self.spread = (min(self.samples), max(self.samples))
        if self.reference_samples:
            self.reference = statistics.median(self.reference_samples)
            self.reference_spread = (min(self.reference_samples), max(self.reference_samples))
        if self.value is not None and self.reference:
            self.ratio = self.reference / self.value if self.lower_is_better else self.value / self.reference
        if self.goal and self.error is None:
            what, op, limit = self.goal.split()
            subject = self.ratio if what == "ratio" else self.value
            self.met = None if subject is None else bool(_OPS[op](subject, float(limit)))
        elif self.goal:
            self.met = False
        return self

    def json(self) -> dict[str, Any]:
        data = asdict(self)
        data["value"] = _round(self.value)
        data["reference"] = _round(self.reference)
        data["ratio"] = _round(self.ratio, 3)
        return data


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def _num(x: float | None) -> str:
    if x is None:
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _range(spread: tuple[float, float] | None) -> str:
    return f"{_num(spread[0])}–{_num(spread[1])}" if spread else ""


def _cpu(figure: Figure) -> str:
    parts = [f"{name} {cores:.2f}" for name, cores in figure.server_cpu.items() if cores >= 0.05]
    return ", ".join(parts)


def table(figures: list[Figure]) -> str:
    lines = [
        "| figure | Coffer (median, min–max) | reference (median, min–max) | ratio | goal | met |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        coffer = (
            f"**{_num(f.value)}** {f.unit} ({_range(f.spread)})" if f.value is not None else "not measured"
        )
        ref = (
            f"{_num(f.reference)} ({_range(f.reference_spread)}) {f.reference_name or ''}".strip()
            if f.reference is not None
            else (f.reference_name or "")
        )
        ratio = f"{f.ratio:.2f}×" if f.ratio is not None else ""
        met = {True: "yes", False: "**NO**", None: ""}[f.met]
        goal = ""
        if f.goal:
            what, op, limit = f.goal.split()
            goal = f"{'≥' if op == '>=' else '≤'} {limit}" + ("×" if what == "ratio" else "")
        lines.append(f"| {f.name} | {coffer} | {ref} | {ratio} | {goal} | {met} |")
    return "\n".join(lines)


def details(figures: list[Figure]) -> str:
    lines = [
        "| figure | load generator | client CPU, Coffer run / reference run (cores) "
        "| Coffer CPU (cores per process) | reference CPU (cores) "
        "| CPU ms per request, Coffer / reference | other jobs' CPU (cores, worst) |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        if f.derived or (f.client_cpu is None and not f.server_cpu):
            continue
        client_cpu = " / ".join(f"{c:.2f}" for c in (f.client_cpu, f.reference_client_cpu) if c is not None)
        ref_cpu = f"{f.reference_server_cpu:.2f}" if f.reference_server_cpu is not None else ""
        others = "" if f.others_cpu is None else f"{f.others_cpu:.2f}" + (" ⚠" if f.others_cpu > BUSY else "")
        per_request = ""
        if f.unit in ("req/s", "files/s") and f.value and f.server_cpu:
            per_request = f"{1000 * sum(f.server_cpu.values()) / f.value:.2f}"
            if f.reference and f.reference_server_cpu is not None:
                per_request += f" / {1000 * f.reference_server_cpu / f.reference:.2f}"
        lines.append(
            f"| {f.name} | {f.client} | {client_cpu} | {_cpu(f)} | {ref_cpu} | {per_request} | {others} |"
        )
    notes = [f"- **{f.name}**: {f.note}" for f in figures if f.note]
    notes += [f"- **{f.name}** failed: {f.error}" for f in figures if f.error]
    return "\n".join([*lines, *(["", *notes] if notes else [])])


def write(out_dir: Path, stem: str, meta: dict[str, Any], figures: list[Figure]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {**meta, "figures": [f.json() for f in figures]}
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    md = [
        f"# Coffer benchmark: {meta['mode']}",
        "",
        f"- date: {meta['date']}",
        f"- commit: `{meta['commit']}`",
        f"- machine: {meta['machine']}",
        f"- method: {meta['method']}",
        f"- other jobs on the machine used {meta['other_jobs_cores']:.2f} cores on average during the run"
        + (
            " ⚠ the figures are disturbed: run again on a quiet machine"
            if meta["other_jobs_cores"] > BUSY
            else ""
        ),
        *([f"- S3: {meta['s3']}"] if meta.get("s3") else []),
        "",
        table(figures),
        "",
        "## Load generators and CPU",
        "",
        details(figures),
        "",
    ]
    md_path = out_dir / f"{stem}.md"
    md_path.write_text("\n".join(md))
    return md_path, json_path
