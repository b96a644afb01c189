package asynctool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// fuzzGraph is a graph decoded from fuzz input, with a reference model of
// what Compile must say about it.
type fuzzGraph struct {
	ids     []string
	nilWork []bool
	join    []Join
	hasJoin []bool
	// out[i]: the edges declared out of node i, in order; a nil Depend
	// is recorded as nilDep on the node instead.
	out    [][]compileEdge
	nilDep []bool
	starts []int // -1 is a nil start
	ws     []*WorkerWrapper[int, int]
}

type compileEdge struct {
	to   int
	must bool
}

var compileIDs = []string{"", "a", "b", "c", "d", "e", "f", "g", "", strings.Repeat("long", 100), "h", "i", "j", "k", "l", "m"}

// compileDecode builds a graph of up to 12 nodes from data.
func compileDecode(data []byte) *fuzzGraph {
	pos := 0
	next := func() int {
		if pos >= len(data) {
			return 0
		}
		pos++
		return int(data[pos-1])
	}
	n := 1 + next()%12
	g := &fuzzGraph{
		ids: make([]string, n), nilWork: make([]bool, n), join: make([]Join, n), hasJoin: make([]bool, n),
		out: make([][]compileEdge, n), nilDep: make([]bool, n), ws: make([]*WorkerWrapper[int, int], n),
	}
	for i := range n {
		b := next()
		if b&0x80 != 0 {
			g.ids[i] = compileIDs[b&15] // maybe a duplicate or empty
		} else {
			g.ids[i] = fmt.Sprint("n", i)
		}
		g.nilWork[i] = b&0x70 == 0x70
	}
	for i := range n {
		b := next()
		switch b % 16 {
		case 1:
			g.join[i], g.hasJoin[i] = AllSucceeded(), true
		case 2:
			g.join[i], g.hasJoin[i] = AllDone(), true
		case 3:
			g.join[i], g.hasJoin[i] = AnySucceeded(), true
		case 4:
			g.join[i], g.hasJoin[i] = AtLeast(b/16-1), true
		case 5:
			var names []string
			for k := range b / 16 % 4 {
				names = append(names, g.ids[(b/64+k*5)%n])
			}
			g.join[i], g.hasJoin[i] = NamedSucceeded(names...), true
		case 6:
			fn := func(ups []Upstream) Decision {
				ended := 0
				for _, u := range ups {
					if u.Ended {
						ended++
					}
				}
				return Decision(ended * b / 16 % 3) // wait, run or fail; never suspend
			}
			if b/16 == 15 {
				fn = nil
			}
			g.join[i], g.hasJoin[i] = CustomJoin(fn), true
		}
	}
	for m := next() % 40; m > 0; m-- {
		b, c := next(), next()
		from, to := b%n, c%n
		must := c&0x80 != 0
		if b&0xf0 == 0xf0 {
			g.nilDep[to] = true
			continue
		}
		g.out[from] = append(g.out[from], compileEdge{to, must})
	}
	for k := 1 + next()%3; k > 0; k-- {
		b := next()
		if b == 0xff {
			g.starts = append(g.starts, -1)
		} else {
			g.starts = append(g.starts, b%n)
		}
	}
	if next() == 0xfe {
		g.starts = nil
	}
	return g
}

// build makes fresh wrappers for g and returns its start nodes.
func (g *fuzzGraph) build() []Wrapper {
	for i := range g.ids {
		var wf WorkerFunc[int, int]
		if !g.nilWork[i] {
			wf = func(context.Context, int, Wrappers) (int, error) {
				if i%3 == 0 {
					return 0, errBoom
				}
				return i, nil
			}
		}
		g.ws[i] = NewWrapper(g.ids[i], wf, i)
		if g.hasJoin[i] {
			g.ws[i].Join(g.join[i])
		}
	}
	for i, es := range g.out {
		for k, e := range es {
			if k%2 == 0 {
				g.ws[e.to].Depend(g.ws[i], e.must)
			} else {
				g.ws[i].Next(g.ws[e.to], e.must)
			}
		}
	}
	for i, bad := range g.nilDep {
		if bad {
			g.ws[i].Depend(nil, true)
		}
	}
	var starts []Wrapper
	for _, s := range g.starts {
		if s < 0 {
			starts = append(starts, nil)
		} else {
			starts = append(starts, g.ws[s])
		}
	}
	return starts
}

// want is the reference model: the sentinel Compile must return (nil for
// none) and the nodes it must name; check verifies what cannot be
// predicted exactly (which cycle, which duplicate, which bad join).
func (g *fuzzGraph) want() (sentinel error, nodes []string, check func(*GraphError) error) {
	if len(g.starts) == 0 {
		return ErrNoStart, nil, nil
	}
	// The nodes in the order compile reaches them.
	var order []int
	in := map[int]bool{}
	for _, s := range g.starts {
		if s < 0 {
			return ErrNilWrapper, nil, nil
		}
		if !in[s] {
			in[s] = true
			order = append(order, s)
		}
	}
	for h := 0; h < len(order); h++ {
		for _, e := range g.out[order[h]] {
			if !in[e.to] {
				in[e.to] = true
				order = append(order, e.to)
			}
		}
	}
	for _, i := range order {
		if g.nilDep[i] {
			return ErrNilWrapper, []string{g.ids[i]}, nil
		}
		if g.nilWork[i] {
			return ErrNilWorker, []string{g.ids[i]}, nil
		}
	}
	// Deduplicated edges of the reached graph; conflicts in order.
	succ := map[int][]int{}
	mustOf := map[[2]int]bool{}
	reached := map[int]int{}
	for _, i := range order {
		for _, e := range g.out[i] {
			reached[e.to]++
			k := [2]int{i, e.to}
			if m, ok := mustOf[k]; ok {
				if m != e.must {
					return ErrConflictingEdge, []string{g.ids[i], g.ids[e.to]}, nil
				}
				continue
			}
			mustOf[k] = e.must
			succ[i] = append(succ[i], e.to)
		}
	}
	declared := map[int]int{}
	for _, es := range g.out {
		for _, e := range es {
			declared[e.to]++
		}
	}
	for _, j := range order {
		if declared[j] > reached[j] {
			return ErrUnreachableDependency, []string{g.ids[j]}, nil
		}
	}
	// A cycle, by a plain DFS.
	color := map[int]int{}
	var hasCycle func(int) bool
	hasCycle = func(v int) bool {
		color[v] = 1
		for _, w := range succ[v] {
			if color[w] == 1 || color[w] == 0 && hasCycle(w) {
				return true
			}
		}
		color[v] = 2
		return false
	}
	for _, i := range order {
		if color[i] == 0 && hasCycle(i) {
			return ErrCycle, nil, func(ge *GraphError) error { return g.checkCycle(ge.Nodes, order, succ) }
		}
	}
	count := map[string]int{}
	for _, i := range order {
		if g.ids[i] != "" {
			count[g.ids[i]]++
		}
	}
	for _, i := range order {
		if count[g.ids[i]] > 1 {
			return ErrDuplicateID, nil, func(ge *GraphError) error {
				if len(ge.Nodes) != 1 || count[ge.Nodes[0]] < 2 {
					return fmt.Errorf("duplicate %q is not a duplicated id", ge.Nodes)
				}
				return nil
			}
		}
	}
	// Joins: every bad one, with the nodes it must be reported with.
	bad := map[string][]string{}
	for _, i := range order {
		if !g.hasJoin[i] {
			continue
		}
		var ups []int
		for _, u := range order {
			if slices.Contains(succ[u], i) {
				ups = append(ups, u)
			}
		}
		j := g.join[i]
		var nodes []string
		switch j.kind {
		case joinAtLeast:
			if j.n < 1 || j.n > len(ups) {
				nodes = []string{g.ids[i]}
			}
		case joinNamed:
			anonymous := 0
			for _, u := range ups {
				if g.ids[u] == "" {
					anonymous++
				}
			}
			if len(j.ids) == 0 || slices.Contains(j.ids, "") && anonymous > 1 {
				// No ids, or the empty id of several upstreams (77cfcc0),
				// which Compile finds before a missing id.
				nodes = []string{g.ids[i]}
				break
			}
			for _, id := range j.ids {
				if !slices.ContainsFunc(ups, func(u int) bool { return g.ids[u] == id }) {
					nodes = []string{g.ids[i], id}
					break
				}
			}
		case joinCustom:
			if j.fn == nil || len(ups) == 0 { // a start node's would never be asked
				nodes = []string{g.ids[i]}
			}
		}
		if nodes != nil {
			bad[fmt.Sprint(nodes)] = nodes
		}
	}
	if len(bad) > 0 {
		return ErrBadJoin, nil, func(ge *GraphError) error {
			if _, ok := bad[fmt.Sprint(ge.Nodes)]; !ok {
				return fmt.Errorf("bad join reported as %q, want one of %v", ge.Nodes, bad)
			}
			return nil
		}
	}
	return nil, nil, nil
}

// checkCycle reports whether path, a list of ids, is a cycle of the
// reached graph: it starts and ends with one node, and each id is a
// successor of the one before (ids may be ambiguous, so every node with
// the id is a candidate).
func (g *fuzzGraph) checkCycle(path []string, order []int, succ map[int][]int) error {
	if len(path) < 2 || len(path) > len(order)+1 {
		return fmt.Errorf("cycle path %q has a bad length", path)
	}
	for _, s := range order {
		if g.ids[s] != path[0] {
			continue
		}
		cur := map[int]bool{s: true}
		for _, id := range path[1:] {
			nxt := map[int]bool{}
			for v := range cur {
				for _, w := range succ[v] {
					if g.ids[w] == id {
						nxt[w] = true
					}
				}
			}
			cur = nxt
		}
		if cur[s] {
			return nil
		}
	}
	return fmt.Errorf("cycle path %q is not a cycle of the graph", path)
}

func (g *fuzzGraph) check(t *testing.T) {
	sentinel, nodes, check := g.want()
	starts := g.build()
	_, derr := Describe(starts...)
	pl, err := Compile(starts...)
	if sentinel == nil {
		if err != nil || derr != nil {
			t.Fatalf("Compile: %v, Describe: %v; want no error", err, derr)
		}
		a := New(WithMaxWorkers(2))
		defer a.Close()
		r, err := a.RunPlan(context.Background(), pl, 20*time.Second)
		if err != nil {
			t.Fatalf("RunPlan: %v", err)
		}
		defer r.Release()
		for i, w := range g.ws {
			if _, ok := pl.p.lookup(g.ids[i]); g.ids[i] != "" && w.owner.Load() == pl.p && !ok {
				t.Fatalf("lookup(%q) found nothing", g.ids[i])
			}
		}
		return
	}
	for _, e := range []error{err, derr} {
		var ge *GraphError
		if !errors.As(e, &ge) || !errors.Is(e, sentinel) {
			t.Fatalf("got %v, want a *GraphError wrapping %v", e, sentinel)
		}
		if check != nil {
			if cerr := check(ge); cerr != nil {
				t.Fatal(cerr)
			}
		} else if !slices.Equal(ge.Nodes, nodes) {
			t.Fatalf("%v names %q, want %q", e, ge.Nodes, nodes)
		}
	}
	if err.Error() != derr.Error() {
		t.Fatalf("Compile says %v, Describe %v", err, derr)
	}
	// A rejected graph is released: it can be fixed and run.
	for _, w := range g.ws {
		if w.owner.Load() != nil {
			t.Fatalf("node %q still claimed after %v", w.id, err)
		}
	}
	if _, err2 := Compile(starts...); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("compiled again: %v, first %v", err2, err)
	}
}

// FuzzCompile compares Compile's and Describe's verdicts on random
// small graphs (cycles, duplicates, unreachable and conflicting edges,
// nil workers and wrappers, joins with bad parameters) with a reference
// model, and runs the graphs they accept.
func FuzzCompile(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3, 0, 0, 0, 3, 0, 1, 1, 2, 2, 0, 1, 0})
	f.Add([]byte{5, 0x81, 0x81, 0, 0, 0, 5, 0x55, 0, 0, 0, 4, 0, 1, 1, 2, 2, 3, 3, 4, 1, 0})
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0x54, 0, 3, 0, 3, 1, 3, 2, 3, 3, 0})
	f.Add([]byte{6, 0, 0, 0, 0, 0, 0, 6, 0x16, 0x26, 0, 0, 0, 5, 0, 1, 0, 2, 1, 3, 2, 3, 3, 0x84, 2, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		compileDecode(data).check(t)
	})
}
