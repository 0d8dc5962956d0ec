"""flashc: exact attention (FlashAttention forward and backward) from the
flashc C library, with flash_attn 2.x's Python API.

    from flashc import flash_attn_func   # instead of: from flash_attn import ...

Works on CPU tensors (CPU backend) and CUDA tensors (CUDA backend, when the
library was built with it), with autograd and torch.compile. The package
calls the library through its C ABI (ctypes): nothing is compiled against
PyTorch, so one build serves every PyTorch from 2.4 on.
"""
from . import _library
from .errors import FlashcError, FlashcTypeError, FlashcUnsupportedError, FlashcValueError
from .flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)
from .merge import merge_attn_states
from . import sdpa as _sdpa

#: The version of the C library (flashc_version()), which is the package's.
__version__ = _library.version

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "merge_attn_states",
    "cuda_available",
    "sdpa_available",
    "library_path",
    "FlashcError",
    "FlashcTypeError",
    "FlashcUnsupportedError",
    "FlashcValueError",
    "__version__",
]

#: Path of the loaded libflashc.
library_path = _library.path


def cuda_available():
    """Whether the loaded libflashc has the CUDA backend and sees a GPU."""
    return _library.cuda_available()


def sdpa_available():
    """Whether this torch has PyTorch's flash-attention registry (torch 2.11
    and later): then import flashc has registered the implementation
    "flashc", which torch.nn.attention.activate_flash_attention_impl("flashc")
    turns on for F.scaled_dot_product_attention's flash backend and
    torch.nn.attention.varlen (see flashc.sdpa)."""
    return _sdpa.available()


_sdpa._register()
