"""The script ``BubblewrapExecutor.probe`` runs inside a real read-only sandbox at
start-up, and the bounds it runs under.
"""

from __future__ import annotations

from ._command import CommandLimits

# Run inside a real sandbox by probe(): every property the confinement rests on, checked by
# trying it, with bash and coreutils only (the host's python may not be reachable by the
# sandbox's uid). Prints one line per property that does not hold, then the sentinel, so an
# empty output (a "sandbox" that ran nothing) is not mistaken for success. Nothing here
# changes the host even where a check fails: ": >>" opens for writing and writes nothing.
_PROBE_SENTINEL = "broker-probe-done"
_PROBE_SCRIPT = r"""
[ "$(id -u)" != 0 ] || echo "the command runs as uid 0"
cap=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
[ "$cap" = 0000000000000000 ] || echo "the command keeps capabilities (CapEff $cap)"
if command -v mount >/dev/null; then
    mount -o remount,bind,rw / 2>/dev/null && echo "a remount of / succeeds"
fi
( : >> /proc/sys/kernel/core_pattern ) 2>/dev/null && echo "/proc/sys is writable"
f=/dev/shm/setuid-probe
: > "$f" && chmod 6755 "$f" 2>/dev/null
{ [ -u "$f" ] || [ -g "$f" ]; } && echo "a setuid bit can be set"
for d in /run /var/run; do
    [ -z "$(ls -A "$d" 2>/dev/null)" ] || echo "$d is visible"
done
if command -v unshare >/dev/null; then
    unshare -U true 2>/dev/null && echo "a nested user namespace can be created"
fi
echo broker-probe-done
"""

_PROBE_LIMITS = CommandLimits(time_limit=10.0, output_limit=4096)
