# Every Go module in the tree: the root library and any module with its own
# go.mod (examples or integrations that need extra dependencies).
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)
GO ?= go

.PHONY: test vet race allocs norace fmtcheck bench benchcmp benchab fuzz example

## test: what CI runs — formatting, vet, the race-enabled test suite of every
## module, and the tests the race detector would distort: the allocation
## guards, and a probe whose race the detector's slowdown hides.
test: fmtcheck vet race allocs norace

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do echo "go vet $$m"; (cd $$m && $(GO) vet ./...); done

race:
	@set -e; for m in $(MODULES); do echo "go test -race $$m"; (cd $$m && $(GO) test -race -count=1 ./...); done

allocs:
	$(GO) test -count=1 -run 'Allocates' -v .

norace:
	$(GO) test -count=1 -run 'TestTimedRunWritesNoReadyTimeAfterItsEnd' -v .

## bench: the benchmark suite, ten samples each, into bench.txt.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=10 ./benchmarks/ | tee bench.txt

## benchcmp: a benchstat table of bench.txt.
benchcmp:
	$(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20251208221838-04cf7a2dca90 bench.txt

## benchab: an A/B run against git revision BASE (required): ROUNDS rounds
## (8) in alternating order of the benchmarks matching BENCH (run of a
## plan on the 1,000-node shapes), medians of the per-round differences;
## raw output in ab-raw.txt. See benchmarks/ab.sh.
ROUNDS ?= 8
BENCH ?= Graph///impl=library-run$$
benchab:
	@test -n "$(BASE)" || { echo "usage: make benchab BASE=<git revision> [ROUNDS=8] [BENCH=pattern]"; exit 2; }
	bash benchmarks/ab.sh '$(BASE)' '$(ROUNDS)' '$(BENCH)'

## fuzz: a short fuzzing session over the graph builder.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzRandomDAG -fuzztime=60s .

## example: the main example, a request fan-out with fallbacks and a deadline.
example:
	$(GO) run ./examples/rpcfanout
