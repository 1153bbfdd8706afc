"""A run's speed against its device: examples and tokens per second (``perf/...`` metrics) and,
where the device's peak is known, the model FLOPs utilisation (MFU)."""

from __future__ import annotations

import torch

# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' datasheets, keyed by the exact name
# ``torch.cuda.get_device_name`` reports: one family's parts differ (the H100 PCIe card peaks at
# 756 TFLOP/s, the SXM one at 989), so a substring would pick the wrong one ("L4" is in "L40S").
GPU_PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H100 NVL": 835e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA L40S": 362e12,
    "NVIDIA L4": 121e12,
    "NVIDIA A10": 125e12,
}


def gpu_peak_flops(device_name: str) -> float | None:
    """The bf16 peak of a GPU named exactly as torch names it; ``None`` for any other name
    (set ``train.peak_flops`` for MFU there)."""
    return GPU_PEAK_FLOPS.get(device_name.strip())


def device_peak(device: torch.device, autocast) -> float | None:
    """The peak MFU is measured against: a known GPU's bf16 peak when training in bf16."""
    if device.type != "cuda" or autocast.fast_dtype != torch.bfloat16:
        return None
    return gpu_peak_flops(torch.cuda.get_device_name(device))


class Throughput:
    """Examples and tokens per second of a member's training steps since its last evaluation
    (evaluation time excluded).

    In a pack every step trains all members at once, so a member's ``perf/tokens_per_s`` and
    ``perf/mfu`` are its share: its own tokens over the pack's step time (the active members'
    figures add up to the pack's). ``perf/pack_tokens_per_s`` and ``perf/pack_mfu`` are the
    whole pack's: every row the step computed, stopped members' included. A pack of one
    reports the same figure under both names.
    """

    def __init__(self, flops_per_token: int, peak_flops: float | None) -> None:
        self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
        self.seconds, self.examples, self.tokens, self.pack_tokens = 0.0, 0, 0, 0

    def add(self, seconds: float, examples: int, tokens: int, pack_tokens: int) -> None:
        self.seconds += seconds
        self.examples += examples
        self.tokens += tokens
        self.pack_tokens += pack_tokens

    def pop(self) -> dict[str, float]:
        """The figures since the last call (none before any step), and start counting again."""
        if self.seconds == 0:
            return {}
        out = {
            "perf/examples_per_s": self.examples / self.seconds,
            "perf/tokens_per_s": self.tokens / self.seconds,
            "perf/pack_tokens_per_s": self.pack_tokens / self.seconds,
        }
        if self.peak_flops:
            for kind in ("", "pack_"):
                flops = out[f"perf/{kind}tokens_per_s"] * self.flops_per_token
                out[f"perf/{kind}mfu"] = flops / self.peak_flops
        self.seconds, self.examples, self.tokens, self.pack_tokens = 0.0, 0, 0, 0
        return out
