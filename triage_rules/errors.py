"""ExecuTorch runtime error codes (runtime/core/error.h, enum class Error).

Checked against executorch 1.4.1's installed header
(site-packages/executorch/include/executorch/runtime/core/error.h).
"""
from __future__ import annotations

import re

# code -> (name, what the header says it means)
ERROR_CODES: dict[int, tuple[str, str]] = {
    0x00: ("Ok", "a successful operation"),
    0x01: ("Internal", "an internal error occurred"),
    0x02: ("InvalidState", "the executor is in an invalid state for the operation"),
    0x03: ("EndOfMethod", "there are no more steps of execution to run"),
    0x04: ("AlreadyLoaded", "a resource has already been loaded"),
    0x10: ("NotSupported", "the operation is not supported in the current context"),
    0x11: ("NotImplemented", "the operation is not yet implemented"),
    0x12: ("InvalidArgument", "the caller provided an invalid argument"),
    0x13: ("InvalidType", "an object has an invalid type for the operation"),
    0x14: ("OperatorMissing", "operator(s) missing in the operator registry"),
    0x15: ("RegistrationExceedingMaxKernels", "kernel registration exceeded the maximum number of kernels"),
    0x16: ("RegistrationAlreadyRegistered", "the kernel is already registered"),
    0x20: ("NotFound", "a requested resource could not be found (e.g. a backend that is not registered)"),
    0x21: ("MemoryAllocationFailed", "the requested memory could not be allocated"),
    0x22: ("AccessFailed", "a resource could not be accessed"),
    0x23: ("InvalidProgram", "the contents of the program are invalid"),
    0x24: ("InvalidExternalData", "the contents of external data are invalid"),
    0x25: ("OutOfResources", "not enough resources to perform the operation"),
    0x30: ("DelegateInvalidCompatibility", "the backend received an incompatible delegate version (init)"),
    0x31: ("DelegateMemoryAllocationFailed", "the backend failed to allocate memory (init)"),
    0x32: ("DelegateInvalidHandle", "the delegate handle is invalid (execute)"),
}

_CODE_RE = re.compile(r"\berror(?: code)?[:=]?\s*(0x[0-9a-fA-F]{1,4})\b|\bError::?\s*(0x[0-9a-fA-F]{1,4})\b", re.I)


def error_name(code: int) -> str | None:
    entry = ERROR_CODES.get(code)
    return entry[0] if entry else None


def describe(code: int) -> str:
    entry = ERROR_CODES.get(code)
    if entry is None:
        return f"unknown ExecuTorch error 0x{code:02x}"
    return f"Error::{entry[0]} (0x{code:02x}: {entry[1]})"


def find_error_code(text: str) -> int | None:
    """The ExecuTorch error code mentioned in `text` (`error: 0x20`, `error 0x14`), if any."""
    match = _CODE_RE.search(text)
    if not match:
        return None
    return int(match.group(1) or match.group(2), 16)
