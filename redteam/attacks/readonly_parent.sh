# Make the rename fail: plant sub/.git (core.fsmonitor), then take write permission off sub/ (chmod 0555).
# The broker runs as the same ordinary uid, without CAP_DAC_OVERRIDE: rename("sub/.git") is EACCES, the sweep
# logs an error and goes on; the repository stays live.  Nothing warns the person's top-level git status.
set -u
cd "$(git rev-parse --show-toplevel)"; T=$(pwd); OUT=$1
git init -q sub
P="$T/sub/.git/fsmon"
printf '#!/bin/sh\necho "ran as $(id -u) pidns=$(readlink /proc/self/ns/pid) ticket=${CONCLAVE_TICKET:-none} cwd=$(pwd)" >> %s/pwned\nexit 1\n' "$OUT" > "$P"; chmod +x "$P"
git -C sub config core.fsmonitor "$P"
chmod 0555 sub
rm -f "$OUT/pwned"
sleep 3
ls -d sub/.git*
echo planted
