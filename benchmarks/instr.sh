#!/usr/bin/env bash
# instr.sh BENCH NODES [REV]
#
# Instructions per node of one benchmark, counted by valgrind's callgrind
# rather than timed: on a shared VM, where ns/node moves by several
# percent from run to run, the count moves by less than 0.1 per node, so
# it tells apart changes of a few instructions that an A/B run (ab.sh)
# cannot. It is a count, not a speed: a cache miss or a contended CAS
# costs one instruction here and many cycles on the CPU, so a change that
# it favours is still judged with ab.sh.
#
# BENCH is a -bench pattern matching exactly one benchmark, NODES the
# nodes of one iteration (1000 for the chain). The benchmark runs N and
# 2N iterations; the difference, divided by N × NODES, leaves out the
# set-up. Only the functions of the module (whose names hold asynctool,
# the benchmark's worker included), context.(*cancelCtx).Err and the
# runtime's channel receive are counted, which leaves out the scheduler
# and the GC, whose counts vary from run to run. REV, if given, is a git
# revision to build instead of the working tree. Needs valgrind; Go's
# asynchronous preemption is turned off, since callgrind does not follow
# its signals.
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 BENCH NODES [REV]" >&2
	exit 2
fi
bench=$1 nodes=$2 rev=${3:-}
n=300
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
cleanup() {
	[ -n "$rev" ] && git -C "$root" worktree remove --force "$tmp/src" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

src=$root
if [ -n "$rev" ]; then
	git -C "$root" worktree add --detach "$tmp/src" "$rev" >/dev/null 2>&1
	src=$tmp/src
fi
(cd "$src/benchmarks" && go test -c -o "$tmp/bench.test" .)

count() {
	GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" \
		"$tmp/bench.test" -test.run '^$' -test.bench "$bench" -test.benchtime="$1x" >/dev/null 2>&1
	callgrind_annotate --threshold=100 --show-percs=no --inclusive=no "$tmp/cg.$1" 2>/dev/null |
		awk '$1 ~ /^[0-9,]+$/ && $2 ~ /:/ {
			c = $1; gsub(",", "", c)
			if ($0 ~ /asynctool|cancelCtx\)\.Err|runtime\.selectnbrecv|runtime\.chanrecv|runtime\.empty/) s += c
		} END { print s }'
}
a=$(count $n)
b=$(count $((2 * n)))
awk -v a="$a" -v b="$b" -v n="$n" -v nodes="$nodes" 'BEGIN { printf "%.1f instructions/node\n", (b - a) / (n * nodes) }'
