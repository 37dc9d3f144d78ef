#!/bin/sh
# asuser.sh BASE cmd...: run cmd as uid 65534 with HOME=BASE/home and the scratch venv first on PATH.
BASE=$1; shift
exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
  env -i HOME="$BASE/home" PATH="$BASE/venv/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb "$@"
