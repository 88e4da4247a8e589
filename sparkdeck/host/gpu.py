"""Is there an NVIDIA GPU that NVML can talk to? (The full GPU reader builds on this.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPresence:
    available: bool
    name: str | None = None
    driver: str | None = None
    count: int = 0
    reason: str | None = None

    def describe(self) -> str:
        if self.available:
            return f"{self.name} (driver {self.driver}, {self.count} GPU(s))"
        return f"no GPU: {self.reason}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_presence() -> GpuPresence:
    """Ask NVML once; any failure becomes a reason, never an exception."""
    try:
        import pynvml
    except ImportError:
        return GpuPresence(False, reason="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuPresence(False, reason=f"no NVIDIA driver (NVML: {exc})")
    try:
        count = pynvml.nvmlDeviceGetCount()
        name = (
            _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))) if count else None
        )
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        return GpuPresence(count > 0, name, driver, count, None if count else "NVML found no GPU")
    except pynvml.NVMLError as exc:
        return GpuPresence(False, reason=f"NVML error: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
