"""The setuid seccomp program: its shape, and (on this machine) its effect under bwrap."""

from __future__ import annotations

import struct

import pytest

from broker.tools.sandbox._seccomp import SeccompUnsupportedError, setuid_filter


def instructions(program: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_checks_the_arch_first_and_ends_in_allow(machine: str) -> None:
    prog = instructions(setuid_filter(machine))
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[machine]
    assert prog[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
    assert prog[1] == (0x15, 1, 0, arch)  # native arch: skip the refusal
    assert prog[2] == (0x06, 0, 0, 0x00050000 | 38)  # other ABIs: ENOSYS
    assert prog[-1] == (0x06, 0, 0, 0x7FFF0000)


def test_every_jump_lands_inside_the_program() -> None:
    for machine in ("x86_64", "aarch64"):
        prog = instructions(setuid_filter(machine))
        for pc, (code, jt, jf, _) in enumerate(prog):
            if code & 0x07 == 0x05:  # BPF_JMP
                assert pc + 1 + max(jt, jf) < len(prog)


def test_x32_syscalls_are_refused_on_x86_64() -> None:
    prog = instructions(setuid_filter("x86_64"))
    assert (0x35, 0, 1, 0x40000000) in prog  # nr >= __X32_SYSCALL_BIT ...
    index = prog.index((0x35, 0, 1, 0x40000000))
    assert prog[index + 1] == (0x06, 0, 0, 0x00050000 | 38)  # ... -> ENOSYS


def test_an_unknown_architecture_is_refused_by_name() -> None:
    with pytest.raises(
        SeccompUnsupportedError,
        match=r"^no setuid seccomp filter for architecture 'riscv64': supported are aarch64, "
        r"amd64, arm64, x86_64$",
    ):
        setuid_filter("riscv64")
