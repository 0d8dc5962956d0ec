"""Finds and loads libflashc, and declares the C functions the package calls.

Search order: the FLASHC_LIBRARY environment variable (a path to the shared
library), then libflashc.so next to this file (where the wheel puts it).
"""
import ctypes
import functools
import os
import sys

from . import _cabi

LIBRARY_ENV = "FLASHC_LIBRARY"


def _library_file_name():
    if sys.platform == "darwin":
        return "libflashc.dylib"
    if sys.platform == "win32":
        return "flashc.dll"
    return "libflashc.so"


def _find_library():
    override = os.environ.get(LIBRARY_ENV)
    if override:
        if not os.path.isfile(override):
            raise ImportError(
                f"flashc: {LIBRARY_ENV}={override!r} does not name an existing file "
                f"(it must be the path of the {_library_file_name()} shared library)"
            )
        return override
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), _library_file_name())
    if os.path.isfile(bundled):
        return bundled
    raise ImportError(
        f"flashc: the C library {_library_file_name()} was not found at {bundled}. "
        "Install the package with `pip install .` from the flashc source tree (the wheel "
        f"bundles the library), or set {LIBRARY_ENV} to the path of a built "
        f"{_library_file_name()} (for example build/src/{_library_file_name()})."
    )


def _declare(lib):
    """Argument and return types of every function the package calls."""
    P = ctypes.POINTER
    lib.flashc_status_string.argtypes = [_cabi.c_enum]
    lib.flashc_status_string.restype = ctypes.c_char_p
    lib.flashc_last_error_message.argtypes = []
    lib.flashc_last_error_message.restype = ctypes.c_char_p
    lib.flashc_version.argtypes = []
    lib.flashc_version.restype = ctypes.c_char_p
    lib.flashc_cuda_available.argtypes = []
    lib.flashc_cuda_available.restype = ctypes.c_int
    lib.flashc_dtype_size.argtypes = [_cabi.c_enum]
    lib.flashc_dtype_size.restype = ctypes.c_size_t
    lib.flashc_attention_options_default.argtypes = []
    lib.flashc_attention_options_default.restype = _cabi.AttentionOptions
    lib.flashc_attention_forward.argtypes = [P(_cabi.ForwardArgs)]
    lib.flashc_attention_forward.restype = _cabi.c_enum
    lib.flashc_attention_forward_allocating.argtypes = [
        P(_cabi.ForwardArgs),
        ctypes.c_void_p,  # flashc_workspace_allocator (NULL: no scratch)
        ctypes.c_void_p,
    ]
    lib.flashc_attention_forward_allocating.restype = _cabi.c_enum
    lib.flashc_attention_backward_workspace_size.argtypes = [
        P(_cabi.BackwardArgs),
        P(ctypes.c_size_t),
    ]
    lib.flashc_attention_backward_workspace_size.restype = _cabi.c_enum
    lib.flashc_attention_backward.argtypes = [P(_cabi.BackwardArgs)]
    lib.flashc_attention_backward.restype = _cabi.c_enum
    lib.flashc_attention_backward_allocating.argtypes = [
        P(_cabi.BackwardArgs),
        ctypes.c_void_p,  # flashc_workspace_allocator (NULL: the library's, CPU only)
        ctypes.c_void_p,
    ]
    lib.flashc_attention_backward_allocating.restype = _cabi.c_enum
    lib.flashc_attention_kvcache_workspace_size.argtypes = [
        P(_cabi.KvcacheArgs),
        P(ctypes.c_size_t),
    ]
    lib.flashc_attention_kvcache_workspace_size.restype = _cabi.c_enum
    lib.flashc_attention_kvcache.argtypes = [P(_cabi.KvcacheArgs)]
    lib.flashc_attention_kvcache.restype = _cabi.c_enum
    return lib


def _load():
    path = _find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"flashc: could not load the C library {path}: {e}") from e
    try:
        return _declare(lib), path
    except AttributeError as e:
        raise ImportError(
            f"flashc: {path} lacks a function of the flashc C API ({e}); it is not a "
            "libflashc of this version"
        ) from e


lib, path = _load()


def _taking_addresses(name, nargs):
    """A second handle on a C function whose arguments are all pointers,
    declared to take them as plain integer addresses: the package's hot
    path writes its argument structs into raw buffers (see _kernels), and
    ctypes converts an int for c_void_p with the least work."""
    function = lib[name]  # lib[name] is a fresh handle; lib.name stays as declared
    function.argtypes = [ctypes.c_void_p] * nargs
    function.restype = _cabi.c_enum
    return function


attention_forward = _taking_addresses("flashc_attention_forward", 1)
attention_forward_allocating = _taking_addresses("flashc_attention_forward_allocating", 3)
attention_backward_workspace_size = _taking_addresses(
    "flashc_attention_backward_workspace_size", 2
)
attention_backward = _taking_addresses("flashc_attention_backward", 1)
attention_backward_allocating = _taking_addresses("flashc_attention_backward_allocating", 3)

#: The C library's version, "MAJOR.MINOR.PATCH".
version = lib.flashc_version().decode()


@functools.lru_cache(maxsize=None)
def cuda_available():
    """Whether the library has the CUDA backend and sees a CUDA device.

    Asked on first use, not at import, so importing flashc does not
    initialise the CUDA driver (which would break fork-based workers).
    """
    return bool(lib.flashc_cuda_available())


def status_name(status):
    return _cabi.STATUS_NAMES.get(status, f"FLASHC_STATUS_{status}")


def last_error_message():
    return lib.flashc_last_error_message().decode(errors="replace")
