"""Exceptions of the flashc package.

Every failure of the C library (a non-zero flashc_status) and every invalid
argument found on the Python side raises a FlashcError: a RuntimeError that
carries the status (`status`, `status_name`) and the message naming the
offending argument (`message`). Subclasses also derive from the built-in
exception that fits, so callers can catch ValueError, TypeError or
NotImplementedError as they would for any PyTorch function.
"""
from . import _cabi


class FlashcError(RuntimeError):
    """A flashc call failed; `status_name` and `message` say why."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = _cabi.STATUS_NAMES.get(status, f"FLASHC_STATUS_{status}")
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class FlashcValueError(FlashcError, ValueError):
    """An argument has a wrong shape, stride, rank, device or value."""


class FlashcTypeError(FlashcError, TypeError):
    """An argument has an unsupported or mismatched dtype."""


class FlashcUnsupportedError(FlashcError, NotImplementedError):
    """Valid, but not available in this build or on this device
    (FLASHC_ERROR_UNSUPPORTED), or a flash_attn feature flashc lacks."""


_CLASS_OF_STATUS = {
    _cabi.ERROR_DTYPE: FlashcTypeError,
    _cabi.ERROR_DEVICE: FlashcValueError,
    _cabi.ERROR_RANK: FlashcValueError,
    _cabi.ERROR_SHAPE: FlashcValueError,
    _cabi.ERROR_STRIDE: FlashcValueError,
    _cabi.ERROR_HEAD_DIM: FlashcValueError,
    _cabi.ERROR_HEAD_GROUPS: FlashcValueError,
    _cabi.ERROR_CU_SEQLENS: FlashcValueError,
    _cabi.ERROR_DROPOUT: FlashcValueError,
    _cabi.ERROR_WINDOW: FlashcValueError,
    _cabi.ERROR_SOFTCAP: FlashcValueError,
    _cabi.ERROR_SCALE: FlashcValueError,
    _cabi.ERROR_ARGUMENT: FlashcValueError,
    _cabi.ERROR_UNSUPPORTED: FlashcUnsupportedError,
}


def error_for_status(status, message):
    """The exception for a flashc_status (NULL_POINTER, WORKSPACE and
    BACKEND, which the package's own calls should never cause, stay plain
    FlashcError)."""
    return _CLASS_OF_STATUS.get(status, FlashcError)(status, message)
