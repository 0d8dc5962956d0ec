"""struct formats equal to the ctypes mirrors of _cabi, so one
struct.pack_into writes a whole C struct (nested structs, arrays and
padding included) into memory handed to the library: far fewer Python
operations per call than setting ctypes fields one by one.

The formats are derived from the ctypes field offsets (which the tests
check against the C compiler's), never written by hand.
"""
import ctypes
import struct

_POINTER_CODE = {4: "I", 8: "Q"}[ctypes.sizeof(ctypes.c_void_p)]
_SIGNED_CODE = {4: "i", 8: "q"}
_UNSIGNED_CODE = {4: "I", 8: "Q"}


def scalar_code(ctype):
    """The struct code (standard sizes) of a ctypes scalar type."""
    if ctype is ctypes.c_void_p or issubclass(ctype, ctypes._Pointer):
        return _POINTER_CODE
    if ctype is ctypes.c_double:
        return "d"
    if issubclass(ctype, ctypes._SimpleCData):
        size = ctypes.sizeof(ctype)
        # ctypes codes unsigned integers in upper case (c_uint64 is 'L' or 'Q').
        return (_UNSIGNED_CODE if ctype._type_.isupper() else _SIGNED_CODE)[size]
    raise TypeError(f"no struct code for {ctype!r}")


def fields(struct_type, prefix="", base=0):
    """(name, offset, code) of every scalar of `struct_type`, nested structs
    and arrays flattened: "options.causal", "shape[2]"."""
    out = []
    for name, ctype in struct_type._fields_:
        offset = base + getattr(struct_type, name).offset
        full = prefix + name
        if issubclass(ctype, ctypes.Structure):
            out += fields(ctype, full + ".", offset)
        elif issubclass(ctype, ctypes.Array):
            step = ctypes.sizeof(ctype._type_)
            out += [(f"{full}[{i}]", offset + i * step, scalar_code(ctype._type_))
                    for i in range(ctype._length_)]
        else:
            out.append((full, offset, scalar_code(ctype)))
    return out


def packer(struct_type, keep=lambda name: True):
    """A struct.Struct writing the fields of `struct_type` for which
    keep(name) holds, in declaration order, and zero bytes everywhere else
    (padding and dropped fields), over exactly sizeof(struct_type) bytes;
    the names of the fields it takes, and their struct codes."""
    fmt, names, codes, at = "=", [], [], 0
    for name, offset, code in fields(struct_type):
        if not keep(name):
            continue
        fmt += "x" * (offset - at) + code
        names.append(name)
        codes.append(code)
        at = offset + struct.calcsize("=" + code)
    fmt += "x" * (ctypes.sizeof(struct_type) - at)
    result = struct.Struct(fmt)
    assert result.size == ctypes.sizeof(struct_type), (struct_type, fmt)
    return result, tuple(names), tuple(codes)


def misfit(names, codes, values):
    """(name, value, code) of the first value its field cannot hold (what
    made a pack_into fail), or None."""
    for name, code, value in zip(names, codes, values):
        try:
            struct.pack("=" + code, value)
        except struct.error:
            return name, value, code
    return None
