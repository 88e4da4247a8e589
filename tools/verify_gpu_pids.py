"""Checks, on a machine with an NVIDIA GPU, that the safe switch's NVML view works: a child
process that opens a CUDA context (through libcuda with ctypes, no framework needed) appears
in `gpu_process_pids`, and is gone from it after the child is killed; prints how long NVML
took to drop it. Run: PYTHONPATH=. python3 tools/verify_gpu_pids.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from sparkdeck.host.nvml import NvmlReader, gpu_process_pids

CHILD = r"""
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
ptr = ctypes.c_void_p()
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 30)) == 0  # 1 GiB
print("ready", flush=True)
time.sleep(600)
"""


def main() -> int:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    with NvmlReader() as reader:
        reading = reader.read()
        pids = gpu_process_pids(reading)
        mine = [p for g in reading.gpus for p in (g.processes or ()) if p[0] == child.pid]
        print(
            f"NVML lists {sorted(pids or [])}; child {child.pid} listed: {bool(mine)}, "
            f"GPU memory {mine[0][1] / 2**20 if mine and mine[0][1] else None} MiB"
        )
        killed = time.monotonic()
        child.kill()
        child.wait()
        while child.pid in (gpu_process_pids(reader.read()) or set()):
            time.sleep(0.05)
        print(f"child killed: gone from NVML's list after {time.monotonic() - killed:.2f} s")
    return 0 if mine else 1


if __name__ == "__main__":
    sys.exit(main())
