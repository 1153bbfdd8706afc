"""The markdown ``python -m arith.bench`` prints: one table per part of its figures."""

from __future__ import annotations

from typing import Any


def _number(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value >= 1 else f"{value:.2g}"


def markdown_table(title: str, columns: dict[str, str], rows: list[dict[str, Any]]) -> str:
    """A titled markdown table; ``columns`` maps row keys to headers."""
    lines = [f"## {title}", "", "| " + " | ".join(columns.values()) + " |"]
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        lines.append("| " + " | ".join(_number(row.get(key)) for key in columns) + " |")
    return "\n".join(lines)


def render(results: dict[str, Any], reference: str) -> str:
    """The figures of ``arith.bench.run`` as markdown: a heading and one table per part;
    ``reference`` names the model whose step the data rows are a share of."""
    device = results["device"]
    batch = results["data"][0]["batch_size"]
    head = f"# arith.bench on {device} ({results['threads']} threads)"
    if results["load_average"] is not None:
        head += f", 1-min load average {results['load_average']:.1f} at the end"
    tables = [
        head,
        markdown_table(
            "Peak matmul (best square torch.mm)",
            {"dtype": "dtype", "peak_gflops": "GFLOP/s"},
            results["peak"],
        ),
        markdown_table(
            f"Data generation (BatchSource.next_batch, batch {batch})",
            {
                "case": "case",
                "examples_per_s": "examples/s",
                "ms_per_batch": "ms/batch",
                "pct_of_step": f"% of a {reference} fp32 training step",
            },
            results["data"],
        ),
        markdown_table(
            "Training (train() steps after warm-up, MFU against the peak of its precision)",
            {
                "model": "model",
                "precision": "precision",
                "shape": "layers x width",
                "n_params": "params",
                "batch_size": "batch",
                "steps_per_s": "steps/s",
                "tokens_per_s": "tokens/s",
                "model_gflops": "model GFLOP/s",
                "mfu_pct": "MFU %",
            },
            results["train"],
        ),
        markdown_table(
            "Evaluation (greedy decoding, 4x128 model, 4-digit plain addition)",
            {"case": "case", "problems": "problems", "examples_per_s": "examples/s (ratio)"},
            results["eval"],
        ),
    ]
    return "\n\n".join(tables)
