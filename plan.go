package asynctool

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool/internal/graph"
	"github.com/asynctool-go/asynctool/internal/idindex"
)

// plan is a validated graph with ids resolved to indexes, in topological
// order. It is immutable once built.
type plan struct {
	nodes []pnode
	roots []int32 // nodes without dependencies: they start at once
	// startOrder is roots, last first: a run's first task takes them as
	// its ready list, runs the last (roots[0]) and shares the others,
	// which the shared queue hands out last in, first out, so the roots
	// start in order.
	startOrder []int32
	outs       []pedge                  // every node's successors: see pnode.out0
	ins        []int32                  // every node's predecessors with their must flags: see pnode.in0, upstream
	index      idindex.Index            // id → node index, for ids other than ""
	runs       sync.Pool                // *runState, for a Plan's runs
	single     atomic.Pointer[runState] // the run of a single-use graph, once it starts
	// one is the run of a single-use graph (single, once it starts),
	// allocated with its plan. A Plan does not use it.
	one     runState
	started atomic.Uint64 // runs started, for learn
	// scalar[i]: node i's result type holds no pointer (see
	// scalarResults); made by the first recycled run.
	scalarOnce sync.Once
	scalar     []bool
	// compiled: the plan is a Plan's, made by Compile (for errors).
	compiled atomic.Bool
	// endsRun counts the nodes marked EndsRun.
	endsRun int32
	// suspends: a node may become pending (PolicySuspend, or a custom
	// join, which may answer DecideSuspend).
	suspends bool
	// built: the compilation that made the plan succeeded, so the nodes
	// it claimed are its for good (see contend).
	built atomic.Bool
	// ticket ranks the compilation against another one that claims the
	// same nodes at the same time (see contend): 0 until it meets one.
	ticket atomic.Uint64
}

// rank returns p's ticket, drawn the first time a compilation meets
// another one's claim: the lower ticket ranks higher.
func (p *plan) rank() uint64 {
	if t := p.ticket.Load(); t != 0 {
		return t
	}
	p.ticket.CompareAndSwap(0, rand.Uint64()|1)
	return p.ticket.Load()
}

// contend settles a claim of node c by the compilation tok that found it
// claimed by compilation o, still at work: either tok waits until o has
// finished with c, and returns true to claim it again, or tok must yield
// (false): release every claim it holds, wait with yieldWait and start
// over. The one of the two with the lower ticket waits, so that two
// compilations that meet each other's claims do not both give up (each
// would then report ErrReused for a graph that no run used), and waits
// only go from higher ranks to lower ones, so that they cannot form a
// cycle. It is the conflict path alone: a graph compiled by one caller at
// a time never reaches it.
func (tok *plan) contend(c *nodeCore, o *plan) bool {
	mine, theirs := tok.rank(), o.rank()
	if mine == theirs { // 2^-63: draw again, and yield this once
		tok.ticket.CompareAndSwap(mine, rand.Uint64()|1)
		return false
	}
	if mine > theirs {
		return false
	}
	yieldWait(c, o)
	return true
}

// yieldWait waits until compilation o, at work, no longer holds node c
// unfinished: o succeeded (c is then reused), failed, or yielded. o's
// work is bounded: the compilations it may wait for in turn rank lower
// than it, and so on down, and a compilation that yields waits holding
// nothing.
func yieldWait(c *nodeCore, o *plan) {
	for c.owner.Load() == o && !o.built.Load() {
		runtime.Gosched()
	}
}

// scalarResults reports, per node, whether its result type is a number or
// a bool: the slot of such a node that succeeded holds nothing a recycled
// run would keep alive, so it need not be cleared.
func (p *plan) scalarResults() []bool {
	p.scalarOnce.Do(func() {
		p.scalar = make([]bool, len(p.nodes))
		for i := range p.nodes {
			switch p.nodes[i].core.impl.resultType().Kind() {
			case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
				reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
				p.scalar[i] = true
			}
		}
	})
	return p.scalar
}

// quickAction is the longest Action that counts as quick: such nodes are
// not worth a goroutine of their own.
const quickAction = 20 * time.Microsecond

// learn reports whether the run being started should time its nodes'
// Actions: the first four runs of the plan and every 64th after, so that
// what the plan knows about its nodes follows changes in their backends.
func (p *plan) learn() bool {
	n := p.started.Add(1)
	return n <= 4 || n%64 == 0
}

// learnedQuick reports whether sampled runs found the node quick.
func (n *pnode) learnedQuick() bool { return n.known.Load() && n.quick.Load() }

// timed records how long node n's Action took in a sampled run. It
// writes only what changed: the node's line is read by every goroutine of
// every run of the plan, and a store would take it from their caches.
func (n *pnode) timed(d time.Duration) {
	if q := d < quickAction; n.quick.Load() != q {
		n.quick.Store(q)
	}
	if !n.known.Load() {
		n.known.Store(true)
	}
}

// quick reports whether node i is known to be quick. h is the history of
// the Async running a single-use graph, nil for a plan: a node the graph
// knows nothing of is looked up there.
func (p *plan) quick(i int32, h *history) bool {
	n := &p.nodes[i]
	if h != nil && !n.known.Load() {
		h.recall(n)
	}
	return n.learnedQuick()
}

// notQuick counts the nodes in nodes that are not known to be quick (see
// quick).
func (p *plan) notQuick(nodes []int32, h *history) int {
	c := 0
	for _, i := range nodes {
		// learnedQuick first, inline: quick, with its lookup, is a call.
		if !p.nodes[i].learnedQuick() && !p.quick(i, h) {
			c++
		}
	}
	return c
}

// Plan is a compiled graph: validated, cycle-checked, with ids resolved to
// indexes. It is immutable and can be run any number of times, also
// concurrently, with [Async.RunPlan] or [Async.StartPlan]; each run has its
// own state and results, recycled by [Run.Release], so running a plan again
// allocates nothing per node.
//
// Use a Plan when the same graph shape serves many requests: build the
// wrappers once (at start-up), Compile them, and read each run's results
// with [WorkerWrapper.ResultIn]. Each node's param is the one it was
// built with, shared by every run: per-request data reaches the workers
// through the run's context. Use single-use wrappers and
// [Async.BeginWork] when each request builds its own graph.
type Plan struct {
	p *plan
}

// Compile validates the graph reachable from starts, as BeginWork does,
// and compiles it into a Plan. The wrappers become the plan's template:
// they cannot be run by BeginWork or compiled again, and their Result and
// State methods do not see the plan's runs (use ResultIn; Result's Err
// says so, wrapping [ErrReused]). Nor do their
// chaining methods change the plan: a Default, Timeout, Retry, Depend or
// other setting made after Compile is ignored, and every run of the plan
// runs the graph as it was compiled (ExampleCompile_changesAfterCompile).
func Compile(starts ...Wrapper) (*Plan, error) {
	p, err := compile(starts, nil)
	if err != nil {
		return nil, err
	}
	bind(p)
	p.compiled.Store(true)
	return &Plan{p: p}, nil
}

// reusedErr reports that node c belongs to another run or plan.
func reusedErr(c *nodeCore) error {
	if o := c.owner.Load(); o != nil && o.compiled.Load() {
		return graphErr(ErrReused, []string{c.id}, "node %q belongs to a compiled Plan: run the plan with RunPlan or StartPlan, and read its results with ResultIn", c.id)
	}
	return graphErr(ErrReused, []string{c.id}, "node %q; build new wrappers for every run", c.id)
}

// Len returns the number of nodes in the plan: 0 for a nil or zero Plan.
func (pl *Plan) Len() int {
	if pl == nil || pl.p == nil {
		return 0
	}
	return len(pl.p.nodes)
}

// getRun returns a reset run of p, recycled when possible.
func (p *plan) getRun() *runState {
	r, ok := p.runs.Get().(*runState)
	if !ok {
		r = newRun(p, true)
	}
	r.reset()
	return r
}

// pnode is a node of a plan, 64 bytes: one cache line in a plan's array
// (TestPlanNodeSize). Its id is core.id, read where errors, reports and
// lookups need it, and its typed half is core.impl, read next to the
// worker it calls (the wrapper's line that holds the worker holds impl
// too): a copy of either would cost every plan 16 bytes a node.
type pnode struct {
	core *nodeCore
	flow *flowSpec // nil for a node without flow rules
	// The node's successors are plan.outs[out0:out1] and its
	// predecessors plan.ins[in0:in1] (see plan.out and plan.in): offsets
	// instead of three slice headers.
	out0, out1, in0, in1 int32
	nMust, nOpt          int32
	// needOK and needFail are the counted upstream ends that trigger and
	// fail the node (see setThresholds).
	needOK, needFail int32
	// known and quick: what sampled runs of the plan measured of the
	// node's Action (see plan.learn).
	known, quick atomic.Bool
	joinKind     joinKind // flow.join.kind; the default join for a node without flow rules
	shortCircuit bool
	// afterAll: the join triggers only once every upstream has ended, so
	// a triggered node has no upstream left to release.
	afterAll bool
	// hasCallback is false when the node's callback is the no-op default,
	// which is then not called at all.
	hasCallback bool
	// customOut: a successor has a custom join, which runs as part of
	// this node's end; the node claimed from it then carries no end (see
	// Run.upstreamEndedFrom).
	customOut bool
}

// out returns node i's successors, deduplicated.
func (p *plan) out(i int32) []pedge {
	n := &p.nodes[i]
	return p.outs[n.out0:n.out1]
}

// in returns node i's predecessors, deduplicated, each with its must flag
// (see upstream).
func (p *plan) in(i int32) []int32 {
	n := &p.nodes[i]
	return p.ins[n.in0:n.in1]
}

// inEdge encodes a predecessor and the must flag of its edge as an entry
// of plan.ins, the flag in the sign bit: node indexes are below maxNodes,
// and an in-edge costs four bytes.
func inEdge(node int32, must bool) int32 {
	if must {
		return node | math.MinInt32
	}
	return node
}

// upstream decodes an entry of plan.ins.
func upstream(v int32) (node int32, must bool) { return v & math.MaxInt32, v < 0 }

// lookup returns the index of the node with the given id.
func (p *plan) lookup(id string) (int32, bool) { return p.index.Lookup(id, p.nodeID) }

// nodeID returns the id of node k.
func (p *plan) nodeID(k int32) string { return p.nodes[k].core.id }

// nIn is the node's number of predecessors.
func (n *pnode) nIn() int { return int(n.in1 - n.in0) }

// pedge is an out-edge of a plan: node is the successor, must whether
// the edge is a must dependency. plain says that the successor has no
// flow rules (so the default join) and that the edge counts toward its
// join (it is a must edge, or the successor has none): a success at the
// edge's tail then simply counts one more upstream (see
// Run.upstreamEndedFrom).
type pedge struct {
	node  int32
	must  bool
	plain bool
}

// compile claims the nodes reachable from starts by following edges
// forward, validates them and returns the plan, whose nodes stay claimed
// by it (the caller numbers them with bind). On error every claim is
// released, so a rejected graph can be fixed and run. A node claimed by an
// earlier compilation is reported as reused; one claimed by a compilation
// still at work is waited for, or yielded to it (see contend), so that of
// two compilations of one graph at the same time one succeeds. sc, if not nil, lends compile
// its working arrays.
func compile(starts []Wrapper, sc *compileScratch) (*plan, error) {
	return compileGraph(starts, true, sc)
}

// compileScratch holds compile's working arrays, so that BeginWork can
// reuse them from graph to graph (the Async pools them): nothing in a
// plan points into them.
type compileScratch struct {
	cores    []*nodeCore
	flat     []int32
	ints     []int32 // first, seen, idx (3n+1), then TopoOrder's 3n, whose first n are reached until then
	flatMust []bool
	seenMust []bool
}

// maxScratch is the most nodes or edges a pooled compileScratch keeps room
// for: one huge graph does not make every later BeginWork hold its
// arrays.
const maxScratch = 1 << 16

// fits reports whether sc is small enough to be pooled.
func (sc *compileScratch) fits() bool {
	return cap(sc.cores) <= maxScratch && cap(sc.flat) <= maxScratch
}

// grow returns s with length n, reusing its array if it has room.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// compileGraph is compile; with claim false it only reads the wrappers
// (for Describe), finding positions in a map instead of claiming nodes,
// so it may run concurrently with anything else that reads them.
func compileGraph(starts []Wrapper, claim bool, sc *compileScratch) (p *plan, err error) {
	if len(starts) == 0 {
		return nil, &GraphError{Err: ErrNoStart}
	}
	if sc == nil {
		sc = &compileScratch{}
	}
	// The plan being made is the token of this compilation: the nodes it
	// claims point to it, for good if it succeeds.
	tok := &plan{}
	cores := sc.cores[:0]
	var visited map[*nodeCore]int32 // positions, when not claiming
	if !claim {
		visited = make(map[*nodeCore]int32)
	}
	defer func() {
		if err != nil && claim {
			for _, c := range cores {
				c.owner.Store(nil)
			}
		}
		clear(cores) // the scratch must not keep wrappers alive
		sc.cores = cores[:0]
	}()
	// yieldTo and yieldAt: the compilation this one yields to, and the
	// node where it met it (see contend).
	var yieldTo *plan
	var yieldAt *nodeCore
	tooMany := func() error { return graphErr(ErrTooManyNodes, nil, "more than %d nodes", maxNodes) }
	// visit claims c (or, without claiming, records it); the claim's owner
	// alone writes c.idx, which holds c's position until bind.
	visit := func(c *nodeCore) error {
		if !claim {
			if _, ok := visited[c]; !ok {
				if len(cores) == maxNodes {
					return tooMany()
				}
				o := c.owner.Load()
				for o != nil && !o.built.Load() {
					// A compilation at work: whether it keeps the node
					// is its outcome's (see contend).
					yieldWait(c, o)
					o = c.owner.Load()
				}
				if o != nil && o.compiled.Load() {
					return graphErr(ErrReused, []string{c.id}, "node %q belongs to a compiled Plan: Plan.Describe describes it", c.id)
				} else if o != nil {
					return graphErr(ErrReused, []string{c.id}, "node %q is part of a run: Run.Report describes it", c.id)
				}
				visited[c] = int32(len(cores))
				cores = append(cores, c)
			}
			return nil
		}
		for {
			switch o := c.owner.Load(); {
			case o == tok:
				return nil // reached again in this compilation
			case o == nil:
				if len(cores) == maxNodes {
					return tooMany()
				}
				if c.owner.CompareAndSwap(nil, tok) {
					c.idx = int32(len(cores))
					cores = append(cores, c)
					return nil
				}
			case o.built.Load():
				return reusedErr(c) // claimed by an earlier compilation
			case !tok.contend(c, o):
				yieldTo, yieldAt = o, c
				return errYield
			}
		}
	}
	posOf := func(c *nodeCore) (int32, bool) {
		if !claim {
			k, ok := visited[c]
			return k, ok
		}
		return c.idx, c.owner.Load() == tok
	}
	claimAll := func() error {
		for k, s := range starts {
			c := coreOf(s)
			if c == nil {
				return graphErr(ErrNilWrapper, nil, "start node %d is nil", k)
			}
			if err := visit(c); err != nil {
				return err
			}
		}
		for h := 0; h < len(cores); h++ {
			for _, e := range cores[h].out {
				if err := visit(e.to); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for {
		err := claimAll()
		if err == nil {
			break
		}
		if err != errYield {
			return nil, err
		}
		// Another compilation at work ranks higher: let it have the
		// nodes, and claim them again once it is done with them.
		for _, c := range cores {
			c.owner.Store(nil)
		}
		clear(cores)
		cores = cores[:0]
		yieldWait(yieldAt, yieldTo)
		yieldTo, yieldAt = nil, nil
	}

	for _, c := range cores {
		switch {
		case c.buildErr() != nil:
			return nil, c.buildErr()
		case c.impl == nil:
			return nil, graphErr(ErrNilWorker, []string{c.id}, "node %q is a zero WorkerWrapper: make nodes with NewWrapper", c.id)
		case !c.impl.hasWorker():
			return nil, graphErr(ErrNilWorker, []string{c.id}, "node %q", c.id)
		}
		if why, err := c.impl.workerProblem(); err != nil {
			return nil, graphErr(err, []string{c.id}, "node %q: %s", c.id, why)
		}
	}

	// Edges, deduplicated in linear time (seen[j] == i+1 marks an edge
	// i -> j already taken, with its flag in seenMust[j]), with
	// conflicting declarations rejected. The successors of i are
	// flat[first[i]:first[i+1]], their flags in flatMust. reached[j]
	// counts the edges into j that were declared by the nodes reached,
	// repeats included, as inEdges counts every edge declared into j.
	total := 0
	for _, c := range cores {
		total += len(c.out)
	}
	if total > math.MaxInt32 { // edge offsets are int32
		return nil, graphErr(ErrTooManyNodes, nil, "more than %d edges", math.MaxInt32)
	}
	n := int32(len(cores))
	flat, flatMust := grow(sc.flat, total)[:0], grow(sc.flatMust, total)[:0]
	sc.flat, sc.flatMust = flat, flatMust
	ints := grow(sc.ints, int(6*n+1))
	sc.ints = ints
	first, seen, idx := ints[:n+1], ints[n+1:2*n+1], ints[2*n+1:3*n+1]
	reached := ints[3*n+1 : 4*n+1] // TopoOrder's buffer, free until then
	first[0] = 0
	clear(seen)
	clear(reached)
	seenMust := grow(sc.seenMust, int(n))
	sc.seenMust = seenMust
	for i, c := range cores {
		for _, e := range c.out {
			j, _ := posOf(e.to)
			reached[j]++
			if seen[j] == int32(i)+1 {
				if seenMust[j] != e.must {
					return nil, graphErr(ErrConflictingEdge, []string{c.id, e.to.id}, "%q -> %q", c.id, e.to.id)
				}
				continue
			}
			seen[j], seenMust[j] = int32(i)+1, e.must
			flat = append(flat, j)
			flatMust = append(flatMust, e.must)
		}
		first[i+1] = int32(len(flat))
	}
	for j, c := range cores {
		if c.inEdges > reached[j] {
			return nil, unreachableErr(cores, int32(j), c.inEdges-reached[j], posOf)
		}
	}
	succ := func(i int32) []int32 { return flat[first[i]:first[i+1]] }

	// TopoOrder works in the rest of ints, apart from idx, which is
	// made from order below.
	order, cycle := graph.TopoOrder(first, flat, ints[3*n+1:])
	if cycle != nil {
		path := make([]string, len(cycle))
		for k, i := range cycle {
			path[k] = cores[i].id
		}
		return nil, cycleErr(path)
	}

	// Renumber in topological order; seen is free again and holds each
	// node's in-degree under its new index.
	for k, i := range order {
		idx[i] = int32(k)
	}
	p = tok
	p.nodes = make([]pnode, n)
	indeg := seen
	clear(indeg)
	for _, j := range flat {
		indeg[idx[j]]++
	}
	// The plan's arrays come in two allocations whatever the graph's
	// size (see TestCompileWithScratchAllocates): the out-edges, and the
	// int32s: the in-edges, the roots, their start order and the id
	// index's table. Each node's in range starts empty at its offset and
	// grows as its upstreams are met below.
	outs := make([]pedge, 0, len(flat))
	nRoots, named := 0, 0
	off := int32(0)
	for k := range p.nodes {
		n := &p.nodes[k]
		n.in0, n.in1 = off, off
		off += indeg[k]
		if indeg[k] == 0 {
			nRoots++
		}
		if cores[k].id != "" {
			named++
		}
	}
	nSlots := 0
	if named > 0 {
		nSlots = idindex.Slots(named)
	}
	nIns := len(flat)
	ints32 := make([]int32, nIns+2*nRoots+nSlots)
	ins := ints32[:nIns:nIns]
	p.roots = ints32[nIns : nIns : nIns+nRoots]
	p.startOrder = ints32[nIns+nRoots : nIns+2*nRoots : nIns+2*nRoots]
	if named > 0 {
		p.index = idindex.In(ints32[nIns+2*nRoots:])
	}
	// The roots in index order, and their start order, last first.
	for k := range p.nodes {
		if indeg[k] == 0 {
			p.startOrder[nRoots-1-len(p.roots)] = int32(k)
			p.roots = append(p.roots, int32(k))
		}
	}
	var names nameSets
	for _, i := range order {
		c := cores[i]
		n := &p.nodes[idx[i]]
		n.core, n.shortCircuit = c, !c.noShortCircuit
		// Ids are indexed here, under the nodes' final indexes, so that
		// duplicates are found after the graph's shape is checked.
		if c.id != "" {
			if _, dup := p.index.Insert(c.id, idx[i], p.nodeID); dup {
				return nil, graphErr(ErrDuplicateID, []string{c.id}, "two different nodes have id %q", c.id)
			}
		}
		if spec := c.spec(); spec != nil {
			n.flow = spec
			n.joinKind = spec.join.kind
		}
		n.out0 = int32(len(outs))
		for k, j := range succ(i) {
			m := effectiveMust(cores[j], c.id, flatMust[first[i]+int32(k)], &names)
			outs = append(outs, pedge{node: idx[j], must: m})
			to := &p.nodes[idx[j]]
			ins[to.in1] = inEdge(idx[i], m)
			to.in1++
			if m {
				to.nMust++
			} else {
				to.nOpt++
			}
		}
		n.out1 = int32(len(outs))
	}
	for k := range outs { // plain edges, now that every node's flow and nMust are set
		e := &outs[k]
		to := &p.nodes[e.node]
		e.plain = to.flow == nil && (e.must || to.nMust == 0)
	}
	p.outs, p.ins = outs, ins
	custom := false // a node has a custom join
	for k := range p.nodes {
		n := &p.nodes[k]
		if err := n.validateFlow(p); err != nil {
			return nil, err
		}
		n.setThresholds()
		n.hasCallback = n.core.impl.hasCallback()
		if f := n.flow; f != nil {
			custom = custom || f.join.kind == joinCustom
			p.suspends = p.suspends || f.policy == PolicySuspend || f.join.kind == joinCustom
			if f.endsRun {
				p.endsRun++
			}
		}
	}
	if custom {
		for k := range p.nodes {
			for _, e := range p.out(int32(k)) {
				p.nodes[k].customOut = p.nodes[k].customOut || p.nodes[e.node].joinKind == joinCustom
			}
		}
	}
	if claim {
		p.built.Store(true)
	}
	return p, nil
}

// errYield is how visit tells compileGraph to yield to another
// compilation (see contend); it never leaves compileGraph.
var errYield = errors.New("asynctool: yield to another compilation")

// unreachableErr reports that node j of cores has missing upstream edges
// declared by nodes that no start node leads to. Only the upstream keeps
// an edge, so the missing nodes cannot be named; the upstreams that were
// reached are, so that the missing ones can be told from them.
func unreachableErr(cores []*nodeCore, j, missing int32, posOf func(*nodeCore) (int32, bool)) error {
	c := cores[j]
	var found []string
	for _, u := range cores {
		for _, e := range u.out {
			if k, _ := posOf(e.to); k == j {
				found = append(found, fmt.Sprintf("%q", u.id))
				break
			}
		}
	}
	reachedFrom := "none"
	if len(found) > 0 {
		reachedFrom = strings.Join(found, ", ")
	}
	return graphErr(ErrUnreachableDependency, []string{c.id},
		"node %q has %d upstream edge(s) from nodes that no start node leads to (upstreams reached: %s); pass each missing upstream (or a node it depends on) as a start node",
		c.id, missing, reachedFrom)
}

// effectiveMust is whether the edge from upstream id into node c is a must
// dependency under c's join (see NodeReport.Must): the declared flag for
// the default join, always for AllSucceeded and When, membership for
// NamedSucceeded, and never for the joins that count successes or decide
// themselves (AnySucceeded, AtLeast, AllDone, WhenResult, CustomJoin),
// which ignore the flag.
func effectiveMust(c *nodeCore, id string, declared bool, names *nameSets) bool {
	spec := c.spec()
	if spec == nil {
		return declared
	}
	switch j := &spec.join; j.kind {
	case joinDefault:
		return declared
	case joinAll:
		return true
	case joinNamed:
		return names.has(spec, id)
	case joinCustom:
		return j.whenType != nil && !j.whenResult // When, as AllSucceeded
	}
	return false
}

// fewNames is the most ids a NamedSucceeded join, or the upstreams it is
// checked against, are scanned for instead of put in a set.
const fewNames = 8

// nameSets holds, for the NamedSucceeded joins of more than fewNames ids,
// those ids as a set, made the first time one of the join's in-edges is
// marked: scanning the ids for every in-edge would make compiling a wide
// named join quadratic, where building must stay linear.
type nameSets map[*flowSpec]map[string]struct{}

// has reports whether id is one of the ids of spec's join.
func (m *nameSets) has(spec *flowSpec, id string) bool {
	ids := spec.join.ids
	if len(ids) <= fewNames {
		return slices.Contains(ids, id)
	}
	if *m == nil {
		*m = make(nameSets)
	}
	set, ok := (*m)[spec]
	if !ok {
		set = make(map[string]struct{}, len(ids))
		for _, n := range ids {
			set[n] = struct{}{}
		}
		(*m)[spec] = set
	}
	_, ok = set[id]
	return ok
}

// validateFlow rejects flow rules that do not fit the node.
func (n *pnode) validateFlow(p *plan) error {
	f := n.flow
	if f == nil {
		return nil
	}
	ids := []string{n.core.id}
	if why := f.join.ownProblem(); why != "" {
		return graphErr(ErrBadJoin, ids, "node %q: %s", n.core.id, why)
	}
	if (f.join.kind == joinNamed || f.join.whenType != nil) && slices.Contains(f.join.ids, "") {
		// Ids are unique but for the empty one: a join naming it names no
		// one upstream if several have it.
		anonymous := 0
		for _, v := range p.ins[n.in0:n.in1] {
			if k, _ := upstream(v); p.nodes[k].core.id == "" {
				anonymous++
			}
		}
		if anonymous > 1 {
			return graphErr(ErrBadJoin, ids, "node %q: its join names the empty id, which %d of its upstreams have", n.core.id, anonymous)
		}
	}
	switch j := f.join; j.kind {
	case joinAtLeast:
		if j.n > n.nIn() {
			return graphErr(ErrBadJoin, ids, "node %q: AtLeast(%d) needs %d upstreams, it has %d", n.core.id, j.n, j.n, n.nIn())
		}
	case joinNamed:
		// The upstreams' ids, as a set when the join names more than a
		// few: scanning them for every id would be quadratic.
		var ups map[string]struct{}
		if len(j.ids) > fewNames {
			ups = make(map[string]struct{}, n.nIn())
			for _, v := range p.ins[n.in0:n.in1] {
				k, _ := upstream(v)
				ups[p.nodes[k].core.id] = struct{}{}
			}
		}
		for _, id := range j.ids {
			found := false
			if ups != nil {
				_, found = ups[id]
			} else {
				for _, v := range p.ins[n.in0:n.in1] {
					k, _ := upstream(v)
					found = found || p.nodes[k].core.id == id
				}
			}
			if !found {
				return graphErr(ErrBadJoin, []string{n.core.id, id}, "node %q: %q is not one of its upstreams", n.core.id, id)
			}
		}
	case joinCustom:
		if n.nIn() == 0 && j.whenType == nil {
			return graphErr(ErrBadJoin, ids, "node %q: CustomJoin on a node with no upstreams, which would never be asked", n.core.id)
		}
		if j.whenType != nil {
			if err := n.validateWhen(p); err != nil {
				return err
			}
		}
	}
	if f.retry != nil {
		if bad := f.retry.problem(); bad != "" {
			return graphErr(ErrBadRetry, ids, "node %q: %s", n.core.id, bad)
		}
	}
	if f.timeout < 0 {
		return graphErr(ErrBadTimeout, ids, "node %q: Timeout(%v)", n.core.id, f.timeout)
	}
	if f.policy < 0 || f.policy > PolicySuspend {
		return graphErr(ErrBadPolicy, ids, "node %q: OnFailure(%v)", n.core.id, f.policy)
	}
	return nil
}

// ownProblem says what makes j unusable whatever the node's upstreams
// are, for Compile (validateFlow, and ForEach's joinProblem); "" if
// nothing does.
func (j Join) ownProblem() string {
	switch {
	case j.kind == joinAtLeast && j.n < 1:
		return fmt.Sprintf("AtLeast(%d), which needs n >= 1", j.n)
	case j.kind == joinNamed && len(j.ids) == 0:
		return "NamedSucceeded with no ids"
	case j.kind == joinCustom && j.whenType == nil && j.fn == nil:
		return "CustomJoin(nil)"
	case j.kind == joinCustom && j.whenType != nil && j.when == nil:
		return fmt.Sprintf("%s(%q) with a nil condition", j.whenName(), j.ids[0])
	}
	return ""
}

// whenName is "When" or "WhenResult", for a When join's messages.
func (j Join) whenName() string {
	if j.whenResult {
		return "WhenResult"
	}
	return "When"
}

// validateWhen rejects a When join whose id is not an upstream of the
// node, or whose type no value of that upstream can have (ownProblem has
// refused a nil condition).
func (n *pnode) validateWhen(p *plan) error {
	j := &n.flow.join
	id := j.ids[0]
	fn := j.whenName()
	for _, v := range p.ins[n.in0:n.in1] {
		k, _ := upstream(v)
		if p.nodes[k].core.id != id {
			continue
		}
		up, want := p.nodes[k].core.impl.resultType(), j.whenType
		if !canHold(up, want) {
			return graphErr(ErrBadJoin, []string{n.core.id, id},
				"node %q: %s(%q) takes %v, and %q returns %v", n.core.id, fn, id, want, id, up)
		}
		return nil
	}
	return graphErr(ErrBadJoin, []string{n.core.id, id}, "node %q: %q is not one of its upstreams", n.core.id, id)
}

// canHold reports whether a value of static type up, held in an any, can
// be a want (the type assertion x.(want) can succeed).
func canHold(up, want reflect.Type) bool {
	switch {
	case up.Kind() != reflect.Interface && want.Kind() != reflect.Interface:
		return up == want
	case up.Kind() != reflect.Interface:
		return up.Implements(want)
	case want.Kind() != reflect.Interface:
		return want.Implements(up)
	}
	return true // two interfaces: some dynamic type may have both
}

func (p *plan) String() string { return fmt.Sprintf("plan(%d nodes)", len(p.nodes)) }
