"""ctypes mirrors of the types in include/flashc.h.

Field order and types follow the header exactly; the layout is checked
against the C compiler's in tests/python/test_package_smoke.py.
"""
import ctypes

MAX_RANK = 4
MAX_HEAD_DIM = 256
SDMASK_ROUND = 128

# enum flashc_status
SUCCESS = 0
ERROR_NULL_POINTER = 1
ERROR_DTYPE = 2
ERROR_DEVICE = 3
ERROR_RANK = 4
ERROR_SHAPE = 5
ERROR_STRIDE = 6
ERROR_HEAD_DIM = 7
ERROR_HEAD_GROUPS = 8
ERROR_CU_SEQLENS = 9
ERROR_DROPOUT = 10
ERROR_WINDOW = 11
ERROR_SOFTCAP = 12
ERROR_SCALE = 13
ERROR_WORKSPACE = 14
ERROR_ARGUMENT = 15
ERROR_UNSUPPORTED = 16
ERROR_BACKEND = 17

STATUS_NAMES = {
    SUCCESS: "FLASHC_SUCCESS",
    ERROR_NULL_POINTER: "FLASHC_ERROR_NULL_POINTER",
    ERROR_DTYPE: "FLASHC_ERROR_DTYPE",
    ERROR_DEVICE: "FLASHC_ERROR_DEVICE",
    ERROR_RANK: "FLASHC_ERROR_RANK",
    ERROR_SHAPE: "FLASHC_ERROR_SHAPE",
    ERROR_STRIDE: "FLASHC_ERROR_STRIDE",
    ERROR_HEAD_DIM: "FLASHC_ERROR_HEAD_DIM",
    ERROR_HEAD_GROUPS: "FLASHC_ERROR_HEAD_GROUPS",
    ERROR_CU_SEQLENS: "FLASHC_ERROR_CU_SEQLENS",
    ERROR_DROPOUT: "FLASHC_ERROR_DROPOUT",
    ERROR_WINDOW: "FLASHC_ERROR_WINDOW",
    ERROR_SOFTCAP: "FLASHC_ERROR_SOFTCAP",
    ERROR_SCALE: "FLASHC_ERROR_SCALE",
    ERROR_WORKSPACE: "FLASHC_ERROR_WORKSPACE",
    ERROR_ARGUMENT: "FLASHC_ERROR_ARGUMENT",
    ERROR_UNSUPPORTED: "FLASHC_ERROR_UNSUPPORTED",
    ERROR_BACKEND: "FLASHC_ERROR_BACKEND",
}

# enum flashc_dtype
DTYPE_FLOAT32 = 0
DTYPE_FLOAT16 = 1
DTYPE_BFLOAT16 = 2
DTYPE_FLOAT64 = 3
DTYPE_INT32 = 4

# enum flashc_device_type
DEVICE_CPU = 0
DEVICE_CUDA = 1

# C enums are int-sized on every ABI the library targets.
c_enum = ctypes.c_int


class Device(ctypes.Structure):
    _fields_ = [
        ("type", c_enum),
        ("index", ctypes.c_int),
    ]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", c_enum),
        ("device", Device),
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("stride", ctypes.c_int64 * MAX_RANK),
    ]


class AttentionOptions(ctypes.Structure):
    _fields_ = [
        ("softmax_scale", ctypes.c_double),
        ("causal", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_double),
        ("alibi_slopes", ctypes.POINTER(Tensor)),
        ("dropout_p", ctypes.c_double),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
        ("deterministic", ctypes.c_int),
        ("num_threads", ctypes.c_int),
        ("stream", ctypes.c_void_p),
    ]


class Varlen(ctypes.Structure):
    _fields_ = [
        ("cu_seqlens_q", ctypes.POINTER(Tensor)),
        ("cu_seqlens_k", ctypes.POINTER(Tensor)),
        ("seqused_k", ctypes.POINTER(Tensor)),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("block_table", ctypes.POINTER(Tensor)),
    ]


class ForwardArgs(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.POINTER(Tensor)),
        ("k", ctypes.POINTER(Tensor)),
        ("v", ctypes.POINTER(Tensor)),
        ("out", ctypes.POINTER(Tensor)),
        ("lse", ctypes.POINTER(Tensor)),
        ("s_dmask", ctypes.POINTER(Tensor)),
        ("varlen", Varlen),
        ("options", AttentionOptions),
    ]


class BackwardArgs(ctypes.Structure):
    _fields_ = [
        ("dout", ctypes.POINTER(Tensor)),
        ("q", ctypes.POINTER(Tensor)),
        ("k", ctypes.POINTER(Tensor)),
        ("v", ctypes.POINTER(Tensor)),
        ("out", ctypes.POINTER(Tensor)),
        ("lse", ctypes.POINTER(Tensor)),
        ("dlse", ctypes.POINTER(Tensor)),
        ("dq", ctypes.POINTER(Tensor)),
        ("dk", ctypes.POINTER(Tensor)),
        ("dv", ctypes.POINTER(Tensor)),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("varlen", Varlen),
        ("options", AttentionOptions),
    ]


class KvcacheArgs(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.POINTER(Tensor)),
        ("k_cache", ctypes.POINTER(Tensor)),
        ("v_cache", ctypes.POINTER(Tensor)),
        ("k_new", ctypes.POINTER(Tensor)),
        ("v_new", ctypes.POINTER(Tensor)),
        ("cache_seqlens", ctypes.POINTER(Tensor)),
        ("cache_batch_idx", ctypes.POINTER(Tensor)),
        ("cache_leftpad", ctypes.POINTER(Tensor)),
        ("block_table", ctypes.POINTER(Tensor)),
        ("rotary_cos", ctypes.POINTER(Tensor)),
        ("rotary_sin", ctypes.POINTER(Tensor)),
        ("rotary_interleaved", ctypes.c_int),
        ("num_splits", ctypes.c_int),
        ("out", ctypes.POINTER(Tensor)),
        ("lse", ctypes.POINTER(Tensor)),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("options", AttentionOptions),
    ]
