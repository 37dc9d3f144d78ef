# Outlive the final sweep: a detached child (setsid, double fork, stdio closed) plants sub/.git after the
# agent itself has exited, i.e. after the last-agent-exit sweep, if it survives the launcher's reaping.
set -u
cd "$(git rev-parse --show-toplevel)"; T=$(pwd); OUT=$1
setsid sh -c '
T=$1; OUT=$2
for i in $(seq 60); do sleep 0.05; done
git init -q "$T/sub"; P="$T/sub/.git/fsmon"
printf "#!/bin/sh\necho late-plant-ran-as-\$(id -u) >> %s/pwned\nexit 1\n" "$OUT" > "$P"; chmod +x "$P"
git -C "$T/sub" config core.fsmonitor "$P"; echo planted-late > "$OUT/late"
' late "$T" "$OUT" </dev/null >/dev/null 2>&1 &
echo "agent exits now"
