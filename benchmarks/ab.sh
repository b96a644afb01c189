#!/usr/bin/env bash
# ab.sh BASE ROUNDS PATTERN...
#
# An A/B run of the benchmark suite: git revision BASE against the working
# tree, on this machine, ROUNDS rounds of one count per benchmark matching
# each PATTERN (a -bench pattern). The order alternates, base first in odd
# rounds and the working tree first in even ones: on a shared VM, whichever
# binary runs second in a round can be systematically faster or slower, and
# a fixed order reads that as a difference between the two codes. For each
# benchmark it prints the medians of base and work and the median of the
# per-round differences (work - base) of ns/node, or of us-over-goroutines
# for BenchmarkRPCFanoutPaired. The raw output is kept in ab-raw.txt at the
# top of the tree. `make benchab` runs it.
set -euo pipefail

if [ $# -lt 3 ]; then
	echo "usage: $0 BASE ROUNDS PATTERN..." >&2
	exit 2
fi
base=$1 rounds=$2
shift 2
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

git -C "$root" worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
(cd "$tmp/base/benchmarks" && go test -c -o "$tmp/base.test" .)
(cd "$root/benchmarks" && go test -c -o "$tmp/work.test" .)

raw=$root/ab-raw.txt
echo "# ab.sh $base (base) against the working tree at $(git -C "$root" rev-parse --short HEAD), $rounds rounds, $(date -u +%FT%TZ)" >"$raw"
for r in $(seq "$rounds"); do
	if ((r % 2)); then order="base work"; else order="work base"; fi
	for b in $order; do
		echo "### $b round $r" >>"$raw"
		for pat in "$@"; do
			(cd "$root/benchmarks" && "$tmp/$b.test" -test.run '^$' -test.bench "$pat" -test.benchmem -test.count=1) |
				grep '^Benchmark' >>"$raw" || true
		done
	done
done

awk '
function median(a, n,    i, j, t) {
	for (i = 2; i <= n; i++) {
		t = a[i]
		for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
		a[j + 1] = t
	}
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^### / { side = $2; round = $4; next }
/^Benchmark/ {
	for (i = 3; i <= NF; i++) {
		if ($i == "ns/node" || $i == "us-over-goroutines") {
			if (!($1 in seen)) { seen[$1] = 1; names[++nn] = $1 }
			v[$1, side, round] = $(i - 1)
			rounds[round] = 1
			break
		}
	}
}
END {
	for (k = 1; k <= nn; k++) {
		name = names[k]; nd = nb = nw = 0
		for (r in rounds) {
			if ((name, "base", r) in v) bs[++nb] = v[name, "base", r]
			if ((name, "work", r) in v) ws[++nw] = v[name, "work", r]
			if ((name, "base", r) in v && (name, "work", r) in v)
				d[++nd] = v[name, "work", r] - v[name, "base", r]
		}
		if (nd == 0) continue
		printf "%-70s base %9.1f work %9.1f diff %+8.1f  rounds %d\n", name, median(bs, nb), median(ws, nw), median(d, nd), nd
	}
}' "$raw"
