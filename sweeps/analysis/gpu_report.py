"""The GPU acceptance run's report (``python -m sweeps.bench --gpu --report DIR``): every figure
``sweeps.bench_gpu`` measured, as ``figures.json`` and as the tables of ``report.md``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from sweeps.analysis.store import write_atomic

STEP_COLUMNS = ["size", "n_params", "eager_steps_per_s", "graph_steps_per_s", "graph_ratio"]
STEP_COLUMNS += ["compiled_steps_per_s", "compiled_ratio"]
STEP_COLUMNS += ["eager_eval_s", "graph_eval_s", "graph_eval_ratio"]
PACK_COLUMNS = ["size", "n_params", "pack", "unpacked_trials_per_h", "packed_trials_per_h"]
PACK_COLUMNS += ["ratio", "precision", "mfu"]
SHARING_COLUMNS = ["size", "n_params", "trials", "at_once", "fractional_trials_per_h"]
SHARING_COLUMNS += ["packed_trials_per_h", "ratio"]
TABLES = (
    (
        "eager_vs_compiled",
        "One trial, eager, graphed and compiled (steps per second)",
        STEP_COLUMNS,
    ),
    ("packs", "Packs (trials per hour)", PACK_COLUMNS),
    ("sharing", "Sharing the card: fractional GPUs or one pack (trials per hour)", SHARING_COLUMNS),
)
"""The report's tables: the part of the figures each shows, its title and its columns."""


def write_report(folder: Path, figures) -> None:
    """``report.md`` (the figures as tables) and ``figures.json`` in ``folder``; ``figures``:
    ``sweeps.bench_gpu.Figures``."""
    folder.mkdir(parents=True, exist_ok=True)
    data = dataclasses.asdict(figures)
    write_atomic(folder / "figures.json", json.dumps(data, indent=2, default=str) + "\n")
    write_atomic(folder / "report.md", render_report(data))


def render_report(data: dict[str, Any]) -> str:
    """The figures of one run as Markdown."""
    parts = data["parts"]
    lines = [
        f"# GPU acceptance run: {data['device']}",
        "",
        f"{data['started']}, torch {data['torch']}, {data['total_s']:.0f} s in all "
        "(`python -m sweeps.bench --gpu --report DIR`).",
        "",
    ]
    for key, title in (
        ("main_job", "The main job through sweeps.run (gpu: auto)"),
        ("ctrl_c_resume", "One Ctrl-C, then --resume"),
    ):
        part = parts.get(key, {})
        lines += [f"## {title}", "", _fields(part), ""]
    tests = parts.get("cuda_tests", {})
    lines += ["## CUDA tests", "", _fields(tests), ""]
    for key, title, columns in TABLES:
        part = parts.get(key, {})
        lines += [f"## {title}", ""]
        lines += _table(part.get("rows"), columns, part)
    return "\n".join(lines).rstrip() + "\n"


def _fields(part: dict[str, Any]) -> str:
    if not part:
        return "not run"
    return "\n".join(f"- {key}: {value}" for key, value in part.items())


def _table(rows: list[dict] | None, columns: list[str], part: dict[str, Any]) -> list[str]:
    if not rows:
        return [part.get("skipped", "not run"), ""]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [_number(v) if isinstance(v, float) else str(v) for v in map(row.get, columns)]
        out.append("| " + " | ".join(cells).replace("None", "") + " |")
    return [*out, ""]


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
