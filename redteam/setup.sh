#!/bin/sh
# Build a scratch world for an ordinary uid (65534): a venv of the system python3 importing this
# worktree, a home, and a git repository owned by that uid.  Prints the base directory.
set -eu
HERE=$(cd "$(dirname "$0")/.." && pwd)
BASE=$(mktemp -d /tmp/rt-XXXXXX); chmod 755 "$BASE"
/usr/bin/python3 -m venv --without-pip "$BASE/venv"
PURE=$("$BASE/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
DEPS=$(ls -d "$HERE"/.venv/lib/python3*/site-packages)
printf '%s\n%s\n' "$HERE" "$DEPS" > "$PURE/conclave-source.pth"
printf '#!%s -I\nfrom broker.cli import main\nmain()\n' "$BASE/venv/bin/python" > "$BASE/venv/bin/conclave"
chmod 755 "$BASE/venv/bin/conclave"
mkdir -p "$BASE/home" "$BASE/out"
chown 65534:65534 "$BASE/home" "$BASE/out"
echo "$BASE"
