"""Calls of flashc_attention_forward / flashc_attention_backward through
ctypes: descriptors, options, the CUDA stream or CPU thread count, the
backward workspace, and the status check."""
import contextlib
import ctypes

import torch

from . import _cabi, _library, _tensors
from .errors import error_for_status


def _check(status):
    if status != _cabi.SUCCESS:
        raise error_for_status(status, _library.last_error_message())


def _options(device, softmax_scale, causal, window_left, window_right, softcap, alibi,
             dropout_p, seed, offset, deterministic):
    o = _library.lib.flashc_attention_options_default()
    o.softmax_scale = softmax_scale
    o.causal = int(causal)
    o.window_left = window_left
    o.window_right = window_right
    o.softcap = softcap
    o.alibi_slopes = alibi
    o.dropout_p = dropout_p
    o.dropout_seed = seed
    o.dropout_offset = offset
    o.deterministic = int(deterministic)
    if device.type == "cuda":
        o.stream = torch.cuda.current_stream(device).cuda_stream
    else:
        # The CPU kernels follow torch.set_num_threads.
        o.num_threads = torch.get_num_threads()
    return o


def _varlen(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k):
    vl = _cabi.Varlen()
    if cu_seqlens_q is not None:
        vl.cu_seqlens_q = _tensors.pointer(cu_seqlens_q, "cu_seqlens_q")
        vl.cu_seqlens_k = _tensors.pointer(cu_seqlens_k, "cu_seqlens_k")
        vl.seqused_k = _tensors.pointer(seqused_k, "seqused_k")
        vl.max_seqlen_q = max_seqlen_q
        vl.max_seqlen_k = max_seqlen_k
    return vl


def _on_device(device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def forward(q, k, v, out, lse, s_dmask, *, softmax_scale, causal, window_left, window_right,
            softcap, alibi_slopes, dropout_p, seed, offset, cu_seqlens_q=None,
            cu_seqlens_k=None, seqused_k=None, max_seqlen_q=0, max_seqlen_k=0):
    """Runs the forward into the given out / lse / s_dmask (s_dmask may be
    None)."""
    P = _tensors.pointer
    args = _cabi.ForwardArgs()
    args.q, args.k, args.v = P(q, "q"), P(k, "k"), P(v, "v")
    args.out, args.lse, args.s_dmask = P(out, "out"), P(lse, "lse"), P(s_dmask, "s_dmask")
    args.varlen = _varlen(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k)
    args.options = _options(q.device, softmax_scale, causal, window_left, window_right, softcap,
                            P(alibi_slopes, "alibi_slopes"), dropout_p, seed, offset, False)
    with _on_device(q.device):
        _check(_library.lib.flashc_attention_forward(ctypes.byref(args)))


def backward(dout, q, k, v, out, lse, dlse, dq, dk, dv, *, softmax_scale, causal, window_left,
             window_right, softcap, alibi_slopes, dropout_p, seed, offset, deterministic,
             cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0):
    """Runs the backward into the given dq / dk / dv, with a workspace
    allocated by PyTorch on the tensors' device."""
    P = _tensors.pointer
    args = _cabi.BackwardArgs()
    args.dout, args.q, args.k, args.v = P(dout, "dout"), P(q, "q"), P(k, "k"), P(v, "v")
    args.out, args.lse, args.dlse = P(out, "out"), P(lse, "lse"), P(dlse, "dlse")
    args.dq, args.dk, args.dv = P(dq, "dq"), P(dk, "dk"), P(dv, "dv")
    args.varlen = _varlen(cu_seqlens_q, cu_seqlens_k, None, max_seqlen_q, max_seqlen_k)
    args.options = _options(q.device, softmax_scale, causal, window_left, window_right, softcap,
                            P(alibi_slopes, "alibi_slopes"), dropout_p, seed, offset,
                            deterministic)
    with _on_device(q.device):
        nbytes = ctypes.c_size_t(0)
        _check(_library.lib.flashc_attention_backward_workspace_size(ctypes.byref(args),
                                                                     ctypes.byref(nbytes)))
        workspace = None
        if nbytes.value:
            workspace = torch.empty(nbytes.value, dtype=torch.uint8, device=q.device)
            args.workspace = workspace.data_ptr()
            args.workspace_bytes = nbytes.value
        _check(_library.lib.flashc_attention_backward(ctypes.byref(args)))
        # Released right after the launch: the caching allocator gives the
        # memory only to later work on the same stream, which runs after the
        # kernels that read it.
        del workspace
