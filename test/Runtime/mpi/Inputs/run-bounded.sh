#!/usr/bin/env bash
# Runs a command under `timeout` and then says how it ended, so that a lit
# test can tell "failed, as it should" from "hung until killed" (`not`
# passes both) and from "succeeded":
#   run-bounded.sh SECONDS COMMAND...
# prints, after the command's own output, one of
#   run-bounded: exited 0 within SECONDS s
#   run-bounded: exited non-zero within SECONDS s
#   run-bounded: still running after SECONDS s
# and exits 0, leaving the verdict to FileCheck.
limit=$1
shift
start=$(date +%s)
timeout --kill-after=5 "$limit" "$@"
status=$?
elapsed=$(($(date +%s) - start))
if [ "$elapsed" -ge "$limit" ]; then
  echo "run-bounded: still running after $limit s"
elif [ "$status" -eq 0 ]; then
  echo "run-bounded: exited 0 within $limit s"
else
  echo "run-bounded: exited non-zero within $limit s"
fi
exit 0
