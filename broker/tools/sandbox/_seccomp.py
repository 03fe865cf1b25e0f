"""A seccomp filter that refuses to create setuid/setgid files inside the sandbox.

bwrap's ``--seccomp FD`` loads a compiled classic-BPF program (an array of ``struct
sock_filter``, native byte order) before it runs the command; the filter is inherited by every
descendant and cannot be removed. The program built here, in the spirit of Flatpak's and
Chromium's, answers ``EPERM`` to every call that would put ``S_ISUID`` or ``S_ISGID`` on a file:

- ``chmod``, ``fchmod``, ``fchmodat``, ``fchmodat2`` whose mode has either bit;
- ``open``, ``openat``, ``creat`` that create a file (``O_CREAT`` or ``O_TMPFILE``) with either
  bit in the mode, and ``mknod``, ``mknodat`` with either bit;
- ``openat2`` is answered ``ENOSYS`` (its mode sits in a struct seccomp cannot read; libc
  falls back to ``openat``).

Calls from another ABI (i386 ``int 0x80`` on x86-64, x32) are answered ``ENOSYS``: a filter
keyed on native syscall numbers would otherwise be bypassed by switching ABI.

``_seccomp_memfd`` hands the program to bwrap in a memfd.
"""

from __future__ import annotations

import os
import platform
import struct

from ..._errors import BrokerError

__all__ = ["SeccompUnsupportedError", "setuid_filter"]


class SeccompUnsupportedError(BrokerError, RuntimeError):
    """No filter is known for this machine's architecture."""


# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR = 0
_ARCH = 4


def _arg_low(index: int) -> int:
    # Both supported architectures are little-endian: the low 32 bits come first.
    return 16 + 8 * index


_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM = 1
_ENOSYS = 38

_SETID_BITS = 0o6000  # S_ISUID | S_ISGID
_CREATES = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE (same values on x86-64 and aarch64)
_X32_BIT = 0x40000000

# name -> (syscall number, index of the mode argument, index of the flags argument or None)
_X86_64 = {
    "chmod": (90, 1, None),
    "fchmod": (91, 1, None),
    "fchmodat": (268, 2, None),
    "fchmodat2": (452, 2, None),
    "creat": (85, 1, None),
    "mknod": (133, 1, None),
    "mknodat": (259, 2, None),
    "open": (2, 2, 1),
    "openat": (257, 3, 2),
}
_AARCH64 = {
    "fchmod": (52, 1, None),
    "fchmodat": (53, 2, None),
    "fchmodat2": (452, 2, None),
    "mknodat": (33, 2, None),
    "openat": (56, 3, 2),
}
_OPENAT2 = 437  # the same number on both
_ARCHES = {
    "x86_64": (0xC000003E, _X86_64, True),  # AUDIT_ARCH_X86_64, table, has x32
    "amd64": (0xC000003E, _X86_64, True),
    "aarch64": (0xC00000B7, _AARCH64, False),  # AUDIT_ARCH_AARCH64
    "arm64": (0xC00000B7, _AARCH64, False),
}


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def setuid_filter(machine: str | None = None) -> bytes:
    """The compiled filter for *machine* (default: this one's ``platform.machine()``).

    Raises :class:`SeccompUnsupportedError` for an architecture without a syscall table here.
    """
    name = (machine or platform.machine()).lower()
    try:
        audit_arch, table, has_x32 = _ARCHES[name]
    except KeyError:
        known = ", ".join(sorted(_ARCHES))
        raise SeccompUnsupportedError(
            f"no setuid seccomp filter for architecture {name!r}: supported are {known}"
        ) from None
    allow = _ins(_RET_K, 0, 0, _RET_ALLOW)
    eperm = _ins(_RET_K, 0, 0, _RET_ERRNO | _EPERM)
    enosys = _ins(_RET_K, 0, 0, _RET_ERRNO | _ENOSYS)
    prog = [
        _ins(_LD_W_ABS, 0, 0, _ARCH),
        _ins(_JEQ_K, 1, 0, audit_arch),
        enosys,
        _ins(_LD_W_ABS, 0, 0, _NR),
    ]
    if has_x32:
        prog += [_ins(_JGE_K, 0, 1, _X32_BIT), enosys]
    prog += [_ins(_JEQ_K, 0, 1, _OPENAT2), enosys]
    # Invariant: after each block the accumulator may hold an argument, so every block ends
    # in a return and the next block is reached only by a "not this syscall" jump, with the
    # accumulator still holding the syscall number.
    for nr, mode_arg, flags_arg in table.values():
        if flags_arg is None:
            prog += [
                _ins(_JEQ_K, 0, 4, nr),
                _ins(_LD_W_ABS, 0, 0, _arg_low(mode_arg)),
                _ins(_JSET_K, 0, 1, _SETID_BITS),
                eperm,
                allow,
            ]
        else:
            prog += [
                _ins(_JEQ_K, 0, 6, nr),
                _ins(_LD_W_ABS, 0, 0, _arg_low(flags_arg)),
                _ins(_JSET_K, 0, 3, _CREATES),
                _ins(_LD_W_ABS, 0, 0, _arg_low(mode_arg)),
                _ins(_JSET_K, 0, 1, _SETID_BITS),
                eperm,
                allow,
            ]
    prog.append(allow)
    return b"".join(prog)


def _seccomp_memfd() -> int:
    """A memfd holding the setuid filter, positioned at its start, for bwrap's ``--seccomp``."""
    fd = os.memfd_create("broker-seccomp", 0)
    try:
        os.write(fd, setuid_filter())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
