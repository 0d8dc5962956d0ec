"""Calls of flashc_attention_forward / flashc_attention_backward through
ctypes: descriptors, options, the CUDA stream or CPU thread count, the
backward workspace and the forward's scratch, and the status check.

Each call writes its argument struct and the tensor descriptors it points
to into one fresh ctypes buffer, with one struct.pack_into per struct
(formats from _layout): a few microseconds of Python per call, which
matters for short kernels. A fresh buffer per call keeps calls from
several threads (the C call releases the GIL) apart.
"""
import contextlib
import ctypes
import re
import struct

import torch

from . import _cabi, _layout, _library, _tensors
from .errors import FlashcError, FlashcValueError, error_for_status

_VARLEN_FIELDS = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "max_seqlen_q", "max_seqlen_k",
                  "block_table")
_OPTION_FIELDS = ("softmax_scale", "causal", "window_left", "window_right", "softcap",
                  "alibi_slopes", "dropout_p", "dropout_seed", "dropout_offset",
                  "deterministic", "num_threads", "stream")
_TAIL = (*(f"varlen.{f}" for f in _VARLEN_FIELDS), *(f"options.{f}" for f in _OPTION_FIELDS))

# (struct, field names, struct codes) of each argument struct
_FORWARD_LAYOUT = _layout.packer(_cabi.ForwardArgs)
assert _FORWARD_LAYOUT[1] == ("q", "k", "v", "out", "lse", "s_dmask", *_TAIL), _FORWARD_LAYOUT
_BACKWARD_LAYOUT = _layout.packer(_cabi.BackwardArgs)
assert _BACKWARD_LAYOUT[1] == ("dout", "q", "k", "v", "out", "lse", "dlse", "dq", "dk", "dv",
                               "workspace", "workspace_bytes", *_TAIL), _BACKWARD_LAYOUT

# workspace and workspace_bytes (adjacent), written once the size is known.
_WORKSPACE_AT = _cabi.BackwardArgs.workspace.offset
_WORKSPACE = struct.Struct(
    "=" + _layout.scalar_code(ctypes.c_void_p) + _layout.scalar_code(ctypes.c_size_t)
)
assert _cabi.BackwardArgs.workspace_bytes.offset == _WORKSPACE_AT + ctypes.sizeof(ctypes.c_void_p)

# Tensors each call may describe, in the order their descriptors are
# written (write_call_descriptors: the q-like ones, the LSE, the optional
# ones): the forward's eleven, the backward's thirteen.
_FORWARD_TENSORS = ("q", "k", "v", "out", "lse", "s_dmask", "alibi_slopes", "cu_seqlens_q",
                    "cu_seqlens_k", "seqused_k", "block_table")
_BACKWARD_TENSORS = ("dout", "q", "k", "v", "out", "dq", "dk", "dv", "lse", "dlse",
                     "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k")


def _buffer_type(args_size, tensor_count):
    """A ctypes buffer (zeroed when made) for an argument struct followed by
    descriptors; and the byte offset of the first descriptor."""
    alignment = _tensors.DESCRIPTOR_ALIGNMENT
    at = (args_size + alignment - 1) // alignment * alignment
    words = (at + tensor_count * _tensors.DESCRIPTOR_SIZE + 7) // 8
    return ctypes.c_uint64 * words, at


_ForwardBuffer, _FORWARD_DESCRIPTORS_AT = _buffer_type(_FORWARD_LAYOUT[0].size,
                                                       len(_FORWARD_TENSORS))
_BackwardBuffer, _BACKWARD_DESCRIPTORS_AT = _buffer_type(_BACKWARD_LAYOUT[0].size,
                                                         len(_BACKWARD_TENSORS))

# The library's defaults for the fields a call leaves alone: the thread
# count on CUDA, the stream on the CPU.
_DEFAULTS = _library.lib.flashc_attention_options_default()
_DEFAULT_NUM_THREADS = _DEFAULTS.num_threads
_DEFAULT_STREAM = _DEFAULTS.stream or 0

# torch.cuda.current_stream(index).cuda_stream without building a Stream.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream
)
# torch.cuda.current_device() without its lazy-init check (a CUDA tensor
# exists, so CUDA is initialised).
_current_cuda_device = getattr(torch._C, "_cuda_getDevice", None)
_NO_DEVICE_SCOPE = contextlib.nullcontext()


def _pack(struct_layout, buffer, values):
    """Writes an argument struct (struct_layout: _FORWARD_LAYOUT or
    _BACKWARD_LAYOUT) at the start of buffer. A value its C field cannot
    hold (a window of 2**70, a float window) raises the error naming it as
    the C API names it."""
    packer, names, codes = struct_layout
    try:
        packer.pack_into(buffer, 0, *values)
    except struct.error:
        misfit = _layout.misfit(names, codes, values)
        if misfit is None:
            raise
        name, value, code = misfit
        raise FlashcValueError(
            _cabi.ERROR_ARGUMENT,
            f"{name.split('.')[-1]}: {value!r} does not fit the C field {name} ({code!r})",
        ) from None


def _other_device(q):
    """The CUDA device of q, to be made current for the call (the library
    launches on the current device), or None where it already is."""
    index = q.get_device()
    if _current_cuda_device is not None and _current_cuda_device() == index:
        return None
    return torch.cuda.device(index)


def _fail(status):
    raise error_for_status(status, _library.last_error_message())


def _allocate_scratch(holder, nbytes, device):
    """The forward's scratch (flashc_attention_forward_allocating), from
    PyTorch's caching allocator on the current stream: called by the
    library only where a CUDA forward shares out its last wave of tiles.
    The tensor stays in holder (the call's list) until the call returns;
    without the memory (out of memory) the forward runs without it."""
    try:
        scratch = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", device.index))
    except Exception:  # noqa: BLE001 (a failure here must not unwind through C)
        return None
    holder.append(scratch)
    return scratch.data_ptr()


_ALLOCATE_SCRATCH = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_size_t,
                                     _cabi.Device)(_allocate_scratch)
_ALLOCATE_SCRATCH_AT = ctypes.cast(_ALLOCATE_SCRATCH, ctypes.c_void_p).value


# Both calls below run for every attention call, so they are written out
# (the CUDA stream or the CPU thread count, the status check) rather than
# split into helpers: each Python call costs, and on a small problem they
# add up to as much as the kernels.


def forward(q, k, v, out, lse, s_dmask, softmax_scale, causal, window_left, window_right,
            softcap, alibi_slopes, dropout_p, seed, offset, cu_seqlens_q=None,
            cu_seqlens_k=None, seqused_k=None, max_seqlen_q=0, max_seqlen_k=0, block_table=None,
            *, checked=False):
    """Runs the forward into the given out / lse / s_dmask (s_dmask may be
    None). checked=True: the caller has checked that q, k, v have one
    dtype and device and made out and lse on that device, out in that
    dtype (only q is then asked them). (Positional parameters: the
    package's own calls pass them so, which costs less than keywords.)"""
    buffer = _ForwardBuffer()
    if cu_seqlens_q is None:
        cu_seqlens_k = seqused_k = block_table = None
        max_seqlen_q = max_seqlen_k = 0
    a = _tensors.write_call_descriptors(
        buffer, _FORWARD_DESCRIPTORS_AT, (q, k, v, out), lse,
        (s_dmask, alibi_slopes, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table),
        _FORWARD_TENSORS, 4 if checked and block_table is None else 0,
    )
    cuda = q.is_cuda
    _pack(_FORWARD_LAYOUT, buffer,
          (a[0], a[1], a[2], a[3], a[4], a[5], a[7], a[8], a[9], max_seqlen_q, max_seqlen_k,
           a[10], softmax_scale, int(causal), window_left, window_right, softcap, a[6], dropout_p,
           seed, offset, 0, _DEFAULT_NUM_THREADS if cuda else torch.get_num_threads(),
           _current_raw_stream(q.get_device()) if cuda else _DEFAULT_STREAM))
    if not cuda:
        status = _library.attention_forward(ctypes.addressof(buffer))
        if status:
            _fail(status)
        return
    # Scratch made during the call is released after it, in stream order
    # (as the backward's workspace, _call_with_workspace).
    scratch = []
    device = _other_device(q)
    if device is None:
        status = _library.attention_forward_allocating(ctypes.addressof(buffer),
                                                       _ALLOCATE_SCRATCH_AT, id(scratch))
    else:
        with device:
            status = _library.attention_forward_allocating(ctypes.addressof(buffer),
                                                           _ALLOCATE_SCRATCH_AT, id(scratch))
    del scratch
    if status:
        _fail(status)


def backward(dout, q, k, v, out, lse, dlse, dq, dk, dv, softmax_scale, causal, window_left,
             window_right, softcap, alibi_slopes, dropout_p, seed, offset, deterministic,
             cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, *,
             made_gradients=False):
    """Runs the backward into the given dq / dk / dv. made_gradients=True:
    the caller made dq, dk, dv like q, k, v (so they are not asked their
    dtype and device). The workspace: on the CPU the library's own
    (flashc_attention_backward_allocating, one call); on CUDA one PyTorch
    allocates on the current stream after the size query (a ctypes
    callback into Python for it would cost as much as the query)."""
    buffer = _BackwardBuffer()
    if cu_seqlens_q is None:
        cu_seqlens_k = None
        max_seqlen_q = max_seqlen_k = 0
    a = _tensors.write_call_descriptors(
        buffer, _BACKWARD_DESCRIPTORS_AT, (dout, q, k, v, out, dq, dk, dv), lse,
        (dlse, alibi_slopes, cu_seqlens_q, cu_seqlens_k), _BACKWARD_TENSORS,
        3 if made_gradients else 0,
    )
    cuda = q.is_cuda
    _pack(_BACKWARD_LAYOUT, buffer,
          (a[0], a[1], a[2], a[3], a[4], a[8], a[9], a[5], a[6], a[7], 0, 0, a[11], a[12], 0,
           max_seqlen_q, max_seqlen_k, 0, softmax_scale, int(causal), window_left, window_right,
           softcap, a[10], dropout_p, seed, offset, int(deterministic),
           _DEFAULT_NUM_THREADS if cuda else torch.get_num_threads(),
           _current_raw_stream(q.get_device()) if cuda else _DEFAULT_STREAM))
    args = ctypes.addressof(buffer)
    if not cuda:
        status = _library.attention_backward_allocating(args, None, None)
        if status:
            _fail(status)
        return
    _call_with_workspace(q, buffer, _WORKSPACE_AT, _library.attention_backward_workspace_size,
                         _library.attention_backward)


def _call_with_workspace(q, buffer, workspace_at, size_query, call):
    """A call whose argument struct (in buffer) takes a workspace at byte
    workspace_at: the size query, the workspace from PyTorch's allocator on
    q's device (current stream), then the call, on q's device."""
    args = ctypes.addressof(buffer)
    device = _other_device(q) if q.is_cuda else None
    with device if device is not None else _NO_DEVICE_SCOPE:
        nbytes = ctypes.c_size_t(0)
        status = size_query(args, ctypes.addressof(nbytes))
        if status:
            _fail(status)
        workspace = None
        if nbytes.value:
            workspace = q.new_empty(nbytes.value, dtype=torch.uint8)
            _WORKSPACE.pack_into(buffer, workspace_at, workspace.data_ptr(), nbytes.value)
        status = call(args)
        if status:
            _fail(status)
        # Released right after the launch: the caching allocator gives the
        # memory only to later work on the same stream, which runs after the
        # kernels that read it.
        del workspace


# ---- attention over a KV cache ---------------------------------------------------

_KVCACHE_LAYOUT = _layout.packer(_cabi.KvcacheArgs)
_KVCACHE_TENSORS = ("q", "k_cache", "v_cache", "k_new", "v_new", "cache_seqlens",
                    "cache_batch_idx", "cache_leftpad", "block_table", "rotary_cos",
                    "rotary_sin", "out", "lse", "alibi_slopes")
assert _KVCACHE_LAYOUT[1] == (*_KVCACHE_TENSORS[:11], "rotary_interleaved", "num_splits", "out",
                              "lse", "workspace", "workspace_bytes",
                              *(f"options.{f}" for f in _OPTION_FIELDS)), _KVCACHE_LAYOUT
_KvcacheBuffer, _KVCACHE_DESCRIPTORS_AT = _buffer_type(_KVCACHE_LAYOUT[0].size,
                                                       len(_KVCACHE_TENSORS))
_KVCACHE_WORKSPACE_AT = _cabi.KvcacheArgs.workspace.offset
assert (_cabi.KvcacheArgs.workspace_bytes.offset
        == _KVCACHE_WORKSPACE_AT + ctypes.sizeof(ctypes.c_void_p))
_kvcache_workspace_size = _library.lib["flashc_attention_kvcache_workspace_size"]
_kvcache_workspace_size.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
_kvcache_workspace_size.restype = _cabi.c_enum
_NEW_ROWS_NAME = re.compile(r"\b([kv])_new\b")
_kvcache = _library.lib["flashc_attention_kvcache"]
_kvcache.argtypes = [ctypes.c_void_p]
_kvcache.restype = _cabi.c_enum


def kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens, cache_batch_idx, cache_leftpad,
            block_table, rotary_cos, rotary_sin, rotary_interleaved, num_splits, out, lse,
            softmax_scale, causal, window_left, window_right, softcap, alibi_slopes):
    """Runs flashc_attention_kvcache into out / lse, appending k_new / v_new
    into the caches in place. The workspace (rotated q, split partials) is
    allocated here on the call's device and stream; on CUDA that keeps the
    call capturable in a CUDA graph (the caching allocator serves captures
    from the graph's private pool)."""
    buffer = _KvcacheBuffer()
    tensors = (q, k_cache, v_cache, k_new, v_new, cache_seqlens, cache_batch_idx, cache_leftpad,
               block_table, rotary_cos, rotary_sin, out, lse, alibi_slopes)
    a = _tensors.write_descriptors(buffer, _KVCACHE_DESCRIPTORS_AT, tensors, _KVCACHE_TENSORS)
    cuda = q.is_cuda
    _pack(_KVCACHE_LAYOUT, buffer,
          (*a[:11], int(rotary_interleaved), num_splits, a[11], a[12], 0, 0, softmax_scale,
           int(causal), window_left, window_right, softcap, a[13], 0.0, 0, 0, 0,
           _DEFAULT_NUM_THREADS if cuda else torch.get_num_threads(),
           _current_raw_stream(q.get_device()) if cuda else _DEFAULT_STREAM))
    try:
        _call_with_workspace(q, buffer, _KVCACHE_WORKSPACE_AT, _kvcache_workspace_size, _kvcache)
    except FlashcError as e:
        # The C API's k_new / v_new are flash_attn_with_kvcache's k / v.
        raise error_for_status(e.status, _NEW_ROWS_NAME.sub(r"\1", e.message)) from None
