"""Fixtures shared by the flashc Python tests: a distinct seed per test, the
device list and the reasons a device is skipped."""

import functools
import os
import zlib

import pytest
import torch

# FLASHC_TEST_FULL=1 turns on the exhaustive grids (slow); the default run
# still covers every feature.
FULL = os.environ.get("FLASHC_TEST_FULL") == "1"


# FLASHC_TEST_SEED=N changes every test's inputs (as in the C tests).
BASE_SEED = int(os.environ.get("FLASHC_TEST_SEED", "0"))


@pytest.fixture(autouse=True)
def seeded(request):
    """torch.manual_seed with a seed derived from the test id: every test (and
    every parameter set) draws different inputs, reproducibly."""
    seed = zlib.crc32(request.node.nodeid.encode()) ^ (BASE_SEED * 0x9E3779B1 & 0xFFFFFFFF)
    torch.manual_seed(seed)
    return seed


@functools.lru_cache(maxsize=None)
def cuda_skip_reason():
    """None when flashc can run on a CUDA device here, else why not."""
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    import flashc
    q = torch.randn(1, 4, 1, 8, device="cuda", dtype=torch.float16)
    try:
        flashc.flash_attn_func(q, q, q)
    except Exception as exc:  # the library reports a build without CUDA
        return f"flashc cannot run on CUDA here ({type(exc).__name__}: {exc})"
    return None


def skip_unless_device(device, dtype=None):
    """Skip the calling test when `device` cannot run it (with the reason)."""
    if device == "cuda":
        reason = cuda_skip_reason()
        if reason is not None:
            pytest.skip(reason)
        if dtype is not None and dtype not in (torch.float16, torch.bfloat16):
            pytest.skip(f"the CUDA backend takes float16/bfloat16 only, not {dtype}")


DEVICES = ["cpu", "cuda"]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
