#!/bin/sh
# run_attack.sh LEVEL ATTACK_FILE "PERSON_CMD": a one-agent run (uid 65534) whose agent is the shell script
# ATTACK_FILE (args: OUT dir); then the person runs PERSON_CMD in the repository; markers in $B/out.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
LEVEL=$1; ATTACK_FILE=$2; PERSON=$3
B=$("$HERE/setup.sh")
U="$HERE/asuser.sh $B"
$U sh -c "set -e; cd $B/home; mkdir repo; cd repo; git init -q -b main; mkdir sub; echo real > sub/file.txt; echo hi > README.md;
  git add -A; git -c user.name=p -c user.email=p@x commit -qm init"
[ -n "${PRESETUP:-}" ] && $U sh -c "cd $B/home/repo && $PRESETUP"
ATTACK=$(cat "$ATTACK_FILE")
$U /usr/bin/python3 - "$B" "$LEVEL" "$ATTACK" <<'PY'
import json, sys
b, level, attack = sys.argv[1:4]
cmd = ["sh", "-c", attack, "attack", f"{b}/out"]
open(f"{b}/home/team.toml", "w").write(f'[[agent]]\nname = "mallory"\nsandbox = "{level}"\ncommand = {json.dumps(cmd)}\n')
PY
echo "== conclave run (uid 65534, sandbox=$LEVEL, $(basename $ATTACK_FILE))"
$U sh -c "cd $B/home/repo && timeout 300 conclave run --team $B/home/team.toml --repo $B/home/repo --state-dir $B/home/state --accept-team" 2>&1 | grep -v '^[┃┏┡└│]' | tail -25 || true
echo "== the person: $PERSON"
$U sh -c "cd $B/home/repo && $PERSON" 2>&1 | tail -5 || true
echo "== markers ($B/out):"
ls $B/out; cat $B/out/pwned 2>/dev/null || echo "(none)"
echo "the person's pid ns: $(readlink /proc/self/ns/pid)"
