"""Remove one mechanism at a time in a scratch copy and check that its security test goes red.

    python -m tests.security.mutants [NAME ...]

Not collected by pytest (it is slow and copies the tree). Each mutant replaces one exact
snippet (it must occur once) in a copy under a temporary directory, makes the suite's
``sandbox`` fixture skip the probe (which would otherwise refuse most mutants before the
attack test runs), and runs the tests selected by ``-k``. A mutant whose tests stay green is
printed as such; exit status 1 unless every mutant outside ``EQUIVALENT`` is red.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
_Edit = tuple[str, str, str]  # (file, exact snippet, replacement)

# The sandbox fixture without the probe, so the attack tests meet the mutated executor.
NO_PROBE: _Edit = (
    "tests/security/conftest.py",
    "        return await BubblewrapExecutor.probe()",
    "        await trio.lowlevel.checkpoint()\n"
    "        return BubblewrapExecutor(bwrap=shutil.which('bwrap') or 'bwrap')",
)
ARGV = "broker/tools/sandbox/_argv.py"
EXECUTORS = "broker/tools/sandbox/_executors.py"
MUTANTS: dict[str, tuple[str, list[_Edit]]] = {
    "cap-drop kept": (
        "test_no_uid_0 or test_unmount",
        [(ARGV, '"--cap-drop", "ALL",', "")],
    ),
    "no user namespace": (
        "test_no_uid_0 or test_unmount",
        [
            (
                ARGV,
                '"--unshare-user", "--uid", _SANDBOX_ID, "--gid", _SANDBOX_ID,\n'
                '        "--disable-userns",',
                "",
            )
        ],
    ),
    "nested userns allowed": ("test_nested_user_namespace", [(ARGV, '"--disable-userns",', "")]),
    "no seccomp": ("test_setuid_and_setgid", [(ARGV, '"--seccomp", str(seccomp_fd),', "")]),
    "seccomp misses openat": (
        "test_setuid_and_setgid",
        [("broker/tools/sandbox/_seccomp.py", '"openat": (257, 3, 2),', "")],
    ),
    "proc writable": (
        "test_proc_sys",
        [
            (
                ARGV,
                '_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")',
                "_PROC_READ_ONLY = ()",
            )
        ],
    ),
    "sockets visible": (
        "test_host_unix_sockets",
        [
            (
                ARGV,
                '_SOCKET_DIRS = ("/run", "/var/run", "/var/lib/docker", "/var/lib/containerd")',
                "_SOCKET_DIRS = ()",
            )
        ],
    ),
    "environment inherited": (
        "test_secrets",
        [
            (
                "broker/tools/_environment.py",
                "out.update(self.set)\n        return out",
                "return dict(env)",
            )
        ],
    ),
    "bwrap started with our environment": (
        "test_secrets",
        [
            (
                EXECUTORS,
                "env=self.environment.build(),\n                    extra_fds",
                "env=os.environ,\n                    extra_fds",
            )
        ],
    ),
    "no protected binds": (
        "test_protected_paths_are_read_only",
        [(ARGV, '                argv += ["--ro-bind", path, path]\n', "                pass\n")],
    ),
    "created protected paths kept": (
        "test_absent_protected",
        [(EXECUTORS, "removed = _remove_created(ws, absent) if absent else ()", "removed = ()")],
    ),
    "no pids.max": (
        "test_a_fork_bomb",
        [
            (
                "broker/tools/_cgroup.py",
                '                _write(made[-1] / "pids.max", max_processes)\n',
                "",
            )
        ],
    ),
    "no tmpfs size": (
        "test_ram_backed_tmpfs_is_bounded and tmp]",
        [
            (
                ARGV,
                'argv += ["--size", size, "--tmpfs", "/tmp", ws_bind, ws, ws]',
                'argv += ["--tmpfs", "/tmp", ws_bind, ws, ws]',
            )
        ],
    ),
    "dev writable": ("test_dev_is_read_only", [(ARGV, '"--remount-ro", "/dev",', "")]),
    "no memory limit": (
        "test_memory_is_bounded",
        [
            (
                "broker/tools/_cgroup.py",
                '_write(made[-1] / "memory.limit_in_bytes", memory_limit)',
                "pass",
            )
        ],
    ),
    "no claude code names": (
        "test_a_claude_code_matcher",
        [
            (
                "broker/hooks/_settings.py",
                "names = {tool_name, claude_code_name(tool_name), "
                "_OUR_NAMES.get(tool_name, tool_name)}",
                "names = {tool_name}",
            )
        ],
    ),
    "our tool name on stdin": (
        "test_a_claude_code_script_that_checks",
        [
            (
                "broker/hooks/_gate.py",
                "tool_name=claude_code_name(call.name),",
                "tool_name=call.name,",
            )
        ],
    ),
    "event typo silent": (
        "test_settings_that_would_run_fewer",
        [
            (
                "broker/hooks/_settings.py",
                "        problems.append(\n"
                '            f"{source}: hooks.{event} is not a hook event',
                '        (\n            f"{source}: hooks.{event} is not a hook event',
            )
        ],
    ),
    "pins ignored": (
        "test_a_workspace_hook_changed",
        [
            (
                "broker/hooks/_runner.py",
                "if (changed := hook.changed_pin()) is not None:",
                "if (changed := None) is not None:",
            )
        ],
    ),
    "hook not contained": (
        "test_a_setsid_child",
        [
            (
                "broker/hooks/_runner.py",
                "        cgroup = _bounds().contain()\n",
                "        cgroup = None\n",
            ),
            (
                "broker/hooks/_runner.py",
                "        argv = [*await _pid_namespace_prefix(), *argv]",
                "        argv = [*argv]",
            ),
        ],
    ),
    "terminal prints raw": (
        "test_the_terminal_prompt",
        [
            (
                "broker/_display.py",
                "    out = []\n    for char in text:",
                "    return text\n    out = []\n    for char in text:",
            )
        ],
    ),
    "probe trusts any output": (
        "test_a_sandbox_that_only_looks_confined",
        [
            (
                EXECUTORS,
                "        if failures or lines[-1:] != [_PROBE_SENTINEL]:",
                "        if False:",
            )
        ],
    ),
}


# Green by construction (design/sandbox.md): bwrap drops capabilities itself when the sandbox
# uid is not 0; the explicit --cap-drop ALL is a second line of defence.
EQUIVALENT = frozenset({"cap-drop kept"})


def _apply(tree: pathlib.Path, edits: list[_Edit]) -> None:
    for rel, old, new in edits:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"mutant snippet not found exactly once in {rel}: {old!r}")
        path.write_text(text.replace(old, new))


def run(name: str) -> bool:
    """Whether the mutant *name* turns its tests red."""
    select, edits = MUTANTS[name]
    with tempfile.TemporaryDirectory(prefix="broker-mutant-") as scratch:
        tree = pathlib.Path(scratch) / "tree"
        # build/ and dist/ are generated (gitignored); an editable install's link tree there
        # keeps dangling links to modules that have since moved, which copytree cannot copy.
        ignore = shutil.ignore_patterns(
            ".venv", ".git", "node_modules", "__pycache__", ".*_cache", "build", "dist"
        )
        shutil.copytree(ROOT, tree, ignore=ignore)
        _apply(tree, [*edits, NO_PROBE])
        conftest = tree / "tests/security/conftest.py"
        conftest.write_text(
            conftest.read_text().replace("import pytest\n", "import pytest\nimport trio\n", 1)
        )
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": str(tree),
            "LANG": "C.UTF-8",
            "BROKER_SECURITY_UNPRIVILEGED": "1",  # no nested unprivileged re-run
        }
        done = subprocess.run(
            [sys.executable, "-W", "error", "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/security", "-k", select],
            cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    summary = (done.stdout.strip().splitlines() or [done.stderr[-200:]])[-1]
    red = done.returncode != 0
    sys.stdout.write(f"{'red  ' if red else 'GREEN'} {name:34s} {summary}\n")
    return red


def main(argv: list[str]) -> int:
    names = argv or list(MUTANTS)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        sys.stderr.write(f"unknown mutant {unknown[0]!r}: choose from {', '.join(MUTANTS)}\n")
        return 2
    results = {name: run(name) for name in names}
    return 0 if all(red or name in EQUIVALENT for name, red in results.items()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
