#!/bin/sh
# Container entry point: the first argument chooses what runs.
#
#   planner | sender | reconciler | control | intake   the service (pacer-<name>), remaining arguments passed on
#   pacer ... | pacer-... | python ...   that command as given
#   anything else                   a `pacer` subcommand: migrate, topics, status, publish, schema
#   no argument                     the service named by $PACER_SERVICE (build arg SERVICE)
#
# `exec` keeps the Python process as PID 1, so SIGTERM reaches it directly.
set -eu

if [ "$#" -eq 0 ]; then
  if [ -z "${PACER_SERVICE:-}" ]; then
    echo "usage: <planner|sender|reconciler|control|intake|migrate|topics|status ID|publish FILE|schema> [args...]" >&2
    exit 64
  fi
  set -- "$PACER_SERVICE"
fi

case "$1" in
  planner|sender|reconciler|control|intake)
    svc="$1"
    shift
    exec "pacer-$svc" "$@"
    ;;
  pacer|pacer-*|python|python3)
    exec "$@"
    ;;
  *)
    exec pacer "$@"
    ;;
esac
