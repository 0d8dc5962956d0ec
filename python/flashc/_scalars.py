"""Scalar arguments as flash_attn accepts them, converted to Python numbers.

flash_attn hands its scalars to a C++ extension, whose argument conversion
takes anything integer-like for an int (Python ints and bools, numpy
integers, 1-element integer tensors on any device), anything real for a
float (also 1-element tensors of any real dtype) and anything boolean-like
for a bool. Code written for it passes, for example,
`window_size=torch.randint(0, seqlen_k, (2,))` or a numpy integer from a
config. Every entry point of flashc converts its scalars here, once,
before any work; what is not convertible raises the library's error
naming the argument.

A 1-element tensor is read with .item() (a device synchronisation for a
CUDA tensor; under torch.compile a graph break, as flash_attn's own
operators cannot take tensors there either). Python and numpy numbers cost
a type check.
"""
import numbers
import operator

import torch

from . import _cabi
from .errors import FlashcTypeError, FlashcValueError

_INTEGER_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{value!r} ({type(value).__name__})"


def _tensor_item(value, name, status, kind, integer_only):
    if value.numel() != 1:
        raise FlashcValueError(
            status, f"{name}: expected {kind}, got {_describe(value)} (a tensor must have "
            "exactly one element)"
        )
    if integer_only and value.dtype not in _INTEGER_DTYPES:
        raise FlashcTypeError(status, f"{name}: expected {kind}, got {_describe(value)}")
    if value.dtype.is_complex:
        raise FlashcTypeError(status, f"{name}: expected {kind}, got {_describe(value)}")
    return value.item()


def as_int(value, name, status=_cabi.ERROR_ARGUMENT):
    """An int from anything integer-like: int, bool, numpy integer, a
    1-element integer tensor. Floats (even 2.0) and strings raise, as in
    flash_attn."""
    if type(value) is int:
        return value
    if isinstance(value, torch.Tensor):
        return int(_tensor_item(value, name, status, "an integer", integer_only=True))
    if isinstance(value, (str, bytes)) or not hasattr(value, "__index__"):
        raise FlashcTypeError(status, f"{name}: expected an integer, got {_describe(value)}")
    return _index(value)


def as_float(value, name, status=_cabi.ERROR_ARGUMENT):
    """A float from anything real: int, float, bool, numpy number, a
    1-element real tensor."""
    if type(value) is float:
        return value
    if isinstance(value, torch.Tensor):
        return float(_tensor_item(value, name, status, "a real number", integer_only=False))
    if isinstance(value, numbers.Real) or (
        hasattr(value, "__float__") and not isinstance(value, (str, bytes, complex))
    ):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise FlashcTypeError(status, f"{name}: expected a real number, got {_describe(value)}")


def as_optional_float(value, name, status=_cabi.ERROR_ARGUMENT):
    return None if value is None else as_float(value, name, status)


def as_bool(value, name, status=_cabi.ERROR_ARGUMENT):
    """A bool from bool, int, numpy bool or integer, a 1-element bool or
    integer tensor. Floats, strings and None raise."""
    if type(value) is bool:
        return value
    if isinstance(value, torch.Tensor):
        return bool(_tensor_item(value, name, status, "a bool", integer_only=True))
    if _is_numpy_bool(value):
        return bool(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__index__"):
        raise FlashcTypeError(status, f"{name}: expected a bool, got {_describe(value)}")
    return bool(_index(value))


def _index(value):
    """operator.index, but int() for numpy integers: torch.compile traces
    int() of a numpy scalar, not operator.index (the value has __index__,
    so it is an integer either way)."""
    return int(value) if type(value).__module__ == "numpy" else operator.index(value)


def _is_numpy_bool(value):
    # numpy.bool_ (numpy.bool in numpy 2) is no integer (no __index__);
    # numpy itself is not imported, it is no dependency.
    cls = type(value)
    return cls.__module__ == "numpy" and cls.__name__ in ("bool", "bool_")


def attention_options(dropout_p, softmax_scale, causal, window, softcap, deterministic,
                      window_names=("window_size[0]", "window_size[1]")):
    """The scalar arguments shared by every attention entry point;
    window_names: what the caller calls the window's two bounds."""
    if (type(dropout_p) is float and (softmax_scale is None or type(softmax_scale) is float)
            and type(causal) is bool and type(window) is tuple and len(window) == 2
            and type(window[0]) is int and type(window[1]) is int and type(softcap) is float
            and type(deterministic) is bool):
        return dropout_p, softmax_scale, causal, window, softcap, deterministic  # as given
    return (as_float(dropout_p, "dropout_p", _cabi.ERROR_DROPOUT),
            as_optional_float(softmax_scale, "softmax_scale", _cabi.ERROR_SCALE),
            as_bool(causal, "causal"),
            window_size(window, window_names),
            as_float(softcap, "softcap", _cabi.ERROR_SOFTCAP),
            as_bool(deterministic, "deterministic"))


def window_size(window, names=("window_size[0]", "window_size[1]")):
    """flash_attn's window_size, (left, right), from any 2-element sequence
    or tensor of integers."""
    if type(window) is tuple and len(window) == 2 and type(window[0]) is int and \
            type(window[1]) is int:
        return window
    if isinstance(window, torch.Tensor):
        if window.numel() != 2 or window.dtype not in _INTEGER_DTYPES:
            raise FlashcValueError(
                _cabi.ERROR_WINDOW,
                f"window_size: expected 2 integers (left, right), -1 meaning unbounded, got "
                f"{_describe(window)}",
            )
        left, right = window.reshape(2).tolist()
        return int(left), int(right)
    try:
        length = len(window)
    except TypeError:
        length = None
    if length != 2 or isinstance(window, (str, bytes)):
        raise FlashcValueError(
            _cabi.ERROR_WINDOW,
            f"window_size: expected a pair (left, right), -1 meaning unbounded, got {window!r}",
        )
    return (as_int(window[0], names[0], _cabi.ERROR_WINDOW),
            as_int(window[1], names[1], _cabi.ERROR_WINDOW))
