"""The shell scripts that set a session up on the host, and set it up again after a reconnect.

Each session keeps its shell's state (the exported variables, in state.sh) in a private
directory on the host, in /dev/shm when writable. The directory records which sshd process
serves its connection (`owner`), so a later connection can tell a live session's directory
from one left behind (its host was unreachable when it closed) and remove the latter.
"""

# Finds this connection's sshd process (a session's state directory belongs to it), sweeps the
# state directories of connections that are gone (a session whose host was unreachable at close
# left its own), makes this session's directory and reports it, the home, and the start directory.
# Files made here are private (umask 077): state.sh holds the session's exported variables.
OWNER = r"""
umask 077
owner=; p=$$
while [ "${p:-0}" -gt 1 ] 2>/dev/null; do
  IFS= read -r line 2>/dev/null < "/proc/$p/stat" || break
  comm=${line#*\(}; comm=${comm%\)*}
  case $comm in sshd*) owner=$p; break ;; esac
  set -- ${line##*) }; p=$2
done
"""
SWEEP = r"""
for old in /dev/shm/herald-shell-* "${TMPDIR:-/tmp}"/herald-shell-*; do
  [ -d "$old" ] && [ -O "$old" ] && [ -f "$old/owner" ] && [ "$old" != "$keep" ] || continue
  IFS= read -r o 2>/dev/null < "$old/owner"
  if [ -n "$o" ] && IFS= read -r line 2>/dev/null < "/proc/$o/stat"; then
    case ${line#*\(} in sshd*) continue ;; esac
  fi
  rm -rf -- "$old"
done
"""
SETUP = 'start=$1; keep=' + OWNER + SWEEP + r"""
d=$(mktemp -d /dev/shm/herald-shell-XXXXXX 2>/dev/null) ||
  d=$(mktemp -d "${TMPDIR:-/tmp}/herald-shell-XXXXXX") || exit 3
: > "$d/state.sh"; [ -n "$owner" ] && printf '%s\n' "$owner" > "$d/owner"
cd -- "${start:-$HOME}" 2>/dev/null || { rm -rf -- "$d"; exit 4; }
printf '%s\0%s\0%s\0' "$d" "$HOME" "$PWD"
"""
# After a reconnect: the state directory is still there unless the host rebooted (or cleaned
# /tmp, or another session swept it while this one was disconnected); it now belongs to the new
# connection.
RESTORE = "keep=$1" + OWNER + r"""
if test -d "$keep"; then echo kept; else mkdir -m 700 -- "$keep" && : > "$keep/state.sh" && echo new; fi
[ -n "$owner" ] && printf '%s\n' "$owner" > "$keep/owner"
""" + SWEEP
