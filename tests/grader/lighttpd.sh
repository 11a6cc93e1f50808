#!/usr/bin/env bash
# lighttpd as a static-file server for the grader's static profile, with Debian's defaults for what it serves:
#
#   ./tests/grade.sh --profile static -- tests/grader/lighttpd.sh {port} {root}
#
# The folder, index.html for directories, Debian's MIME types (create-mime.conf.pl, as /etc/lighttpd/lighttpd.conf
# includes them), the error log in a temporary folder removed when lighttpd exits. Nothing else is set, so what it
# loses in a report is lighttpd's own behaviour (docs/grading.md). It runs in the foreground (-D).
set -euo pipefail
port=${1:?usage: lighttpd.sh PORT ROOT}
root=${2:?usage: lighttpd.sh PORT ROOT}
bin=$(command -v lighttpd || echo /usr/sbin/lighttpd)
[[ -x $bin ]] || { echo "lighttpd.sh: lighttpd is not installed (apt-get install lighttpd)" >&2; exit 1; }
# SIGTERM, SIGINT and SIGHUP remove this run's folder (the trap below); SIGKILL, which the grader sends to what
# outlives its SIGTERM by 3 s, cannot be caught: each run removes the folders of earlier runs whose script is gone.
for old in "${TMPDIR:-/tmp}"/psp-grade-lighttpd-*; do
  if [[ -f $old/owner ]] && ! kill -0 "$(cat "$old/owner")" 2>/dev/null; then rm -rf "$old"; fi
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/psp-grade-lighttpd-XXXXXX")
echo $$ >"$dir/owner"
cat >"$dir/lighttpd.conf" <<CONF
server.document-root = "$root"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$dir/error.log"
index-file.names = ( "index.html" )
include_shell "/usr/share/lighttpd/create-mime.conf.pl"
CONF
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; rm -rf "$dir"; exit 0' TERM INT HUP
"$bin" -D -f "$dir/lighttpd.conf" &
pid=$!
wait "$pid" || status=$?
rm -rf "$dir"
exit "${status:-0}"
