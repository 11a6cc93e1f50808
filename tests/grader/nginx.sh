#!/usr/bin/env bash
# nginx as a static-file server for the grader's static profile, configured here:
#
#   ./tests/grade.sh --profile static -- tests/grader/nginx.sh {port} {root}
#
# The configuration is the plain one a course would write: the folder, index.html for directories, the MIME types
# that Debian ships, no access log, and no symbolic links followed (below). nginx runs in the foreground (daemon
# off), so the grader stops it by its PID; the configuration and its temporary files go in a folder removed when
# nginx exits.
set -euo pipefail
port=${1:?usage: nginx.sh PORT ROOT}
root=${2:?usage: nginx.sh PORT ROOT}
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x $nginx_bin ]] || { echo "nginx.sh: nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
# SIGTERM, SIGINT and SIGHUP remove this run's folder (the trap below); SIGKILL, which the grader sends to what
# outlives its SIGTERM by 3 s, cannot be caught: each run removes the folders of earlier runs whose script is gone.
for old in "${TMPDIR:-/tmp}"/psp-grade-nginx-*; do
  if [[ -f $old/owner ]] && ! kill -0 "$(cat "$old/owner")" 2>/dev/null; then rm -rf "$old"; fi
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/psp-grade-nginx-XXXXXX")
echo $$ >"$dir/owner"
user_line=""
if ((EUID == 0)); then
  # As root (grade.py --user root; by default the grader runs it as nobody), nginx's workers would switch to nobody,
  # who cannot write the temporary folders below (mode 700): they stay root here, which nginx allows. The server
  # listens on 127.0.0.1 only, for the length of a check.
  user_line="user root root;"
fi
cat >"$dir/nginx.conf" <<CONF
$user_line
daemon off;
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log off;
  keepalive_requests 100000;
  sendfile on;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  server {
    listen 127.0.0.1:$port;
    root $root;
    # By default nginx follows a symbolic link wherever it points: a link planted in the folder to /etc/passwd
    # would be served, and the traversal check fails. "on" refuses every link, the one setting that never leaks.
    disable_symlinks on;
    # The time a client may take to send its request head. nginx's default, 60 s, is longer than the grader's
    # slowloris check waits (15 s): a course that teaches the limit picks one, here the 5 s of this repository's servers.
    client_header_timeout 5s;
  }
}
CONF
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; rm -rf "$dir"; exit 0' TERM INT HUP
"$nginx_bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" &
pid=$!
wait "$pid" || status=$?
rm -rf "$dir"
exit "${status:-0}"
