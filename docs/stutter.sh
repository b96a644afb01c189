#!/usr/bin/env bash
# stutter.sh DIR STOP_MS RUN_MS [TEST FLAGS...]
#
# Runs the race-enabled tests of the Go package in DIR while freezing the
# test process (SIGSTOP, then SIGCONT) for STOP_MS every 0 to 2×RUN_MS,
# which is roughly what an overloaded CI VM does to a test. Plain CPU load
# (taskset and busy loops) never made a test of this repository fail;
# these pauses did, and they are how the timing fixes of 2026-11-26 were
# checked (see that session's closing note), e.g.:
#
#   bash docs/stutter.sh . 25 40 -test.count=3
#   bash docs/stutter.sh otel 90 60 -test.count=20
#   bash docs/stutter.sh durable 100 60 -test.count=3
set -euo pipefail
if [ $# -lt 3 ]; then
	echo "usage: $0 DIR STOP_MS RUN_MS [TEST FLAGS...]" >&2
	exit 2
fi
dir=$1 stop=$2 run=$3
shift 3
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
cd "$dir"
go test -race -c -o "$bin" .
"$bin" "$@" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
	r=$((RANDOM % (2 * run + 1)))
	sleep "$(printf '%d.%03d' $((r / 1000)) $((r % 1000)))"
	kill -STOP "$pid" 2>/dev/null || break
	sleep "$(printf '%d.%03d' $((stop / 1000)) $((stop % 1000)))"
	kill -CONT "$pid" 2>/dev/null || true
done
wait "$pid"
