package asynctool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH109CycleErrorQuotesIDs: a cycle's path was its ids joined with
// " -> " as they are, so a cycle of anonymous nodes read "dependency
// cycle:  ->  -> ", and one through an id holding " -> " could not be
// told from a longer cycle. Ids are quoted, as in every other
// GraphError (`"a" -> "b"` of a conflicting edge).
func TestH109CycleErrorQuotesIDs(t *testing.T) {
	n := func(id string) *WorkerWrapper[int, int] { return NewWrapper(id, okWorker(), 0) }
	tests := []struct {
		name  string
		build func() Wrapper
		msg   string
		nodes []string
	}{
		{"anonymous", func() Wrapper {
			s, b, c := n("s"), n(""), n("")
			b.Depend(s, true)
			c.Depend(b, true)
			b.Depend(c, true)
			return s
		}, `asynctool: dependency cycle: "" -> "" -> ""`, []string{"", "", ""}},
		{"arrow in an id", func() Wrapper {
			x, y := n("x -> y"), n("y")
			y.Depend(x, true)
			x.Depend(y, true)
			return x
		}, `asynctool: dependency cycle: "x -> y" -> "y" -> "x -> y"`, []string{"x -> y", "y", "x -> y"}},
		{"self", func() Wrapper { a := n("a"); a.Depend(a, false); return a }, `asynctool: dependency cycle: "a" -> "a"`, []string{"a", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Describe(tt.build())
			require.ErrorIs(t, err, ErrCycle)
			assert.EqualError(t, err, tt.msg)
			var ge *GraphError
			require.ErrorAs(t, err, &ge)
			assert.Equal(t, tt.nodes, ge.Nodes)
		})
	}
}

// TestH109NamedJoinShowsItsIDsQuoted: a NamedSucceeded join was shown as
// its ids printed with %v, so NamedSucceeded("a b") and
// NamedSucceeded("a", "b") both read "named [a b] succeeded" under the
// node in DOT, Mermaid and the report, and a join naming the empty id
// (which names the node's anonymous upstreams) read "named []
// succeeded", as if it named none. They are quoted, as a When join's id
// is.
func TestH109NamedJoinShowsItsIDsQuoted(t *testing.T) {
	n := func(id string) *WorkerWrapper[int, int] { return NewWrapper(id, okWorker(), 0) }
	ab, a, b, anon := n("a b"), n("a"), n("b"), n("")
	one := n("one").Depend(ab, true).Depend(a, true).Join(NamedSucceeded("a b"))
	two := n("two").Depend(a, true).Depend(b, true).Join(NamedSucceeded("a", "b"))
	empty := n("empty").Depend(anon, true).Depend(a, true).Join(NamedSucceeded(""))
	rep, err := Describe(ab, a, b, anon)
	require.NoError(t, err)
	joins := map[string]string{}
	for _, nr := range rep.Nodes {
		joins[nr.ID] = nr.Join
	}
	assert.Equal(t, `named ["a b"] succeeded`, joins[one.ID()])
	assert.Equal(t, `named ["a" "b"] succeeded`, joins[two.ID()])
	assert.Equal(t, `named [""] succeeded`, joins[empty.ID()])
	assert.Contains(t, rep.DOT(), `label="one\nnamed [\"a b\"] succeeded"`)
}

// TestH109JoinNamingTheEmptyIDOfManyUpstreams: a join that names the
// empty id of a node with several anonymous upstreams was accepted:
// When("") and WhenResult("") then asked their condition about whichever
// of them came first in the plan's order (not the order they were
// declared in), and NamedSucceeded("") waited for all of them. Such a
// join names no one upstream, and is refused; with one anonymous
// upstream it still names that one.
func TestH109JoinNamingTheEmptyIDOfManyUpstreams(t *testing.T) {
	joins := map[string]Join{
		"When":           When("", func(int) bool { return true }),
		"WhenResult":     WhenResult("", func(WorkResult[int]) bool { return true }),
		"NamedSucceeded": NamedSucceeded(""),
	}
	for name, j := range joins {
		t.Run(name, func(t *testing.T) {
			x, y := NewWrapper("", okWorker(), 0), NewWrapper("", okWorker(), 0)
			NewWrapper("c", okWorker(), 0).Depend(x, true).Depend(y, true).Join(j)
			_, err := Compile(x, y)
			require.ErrorIs(t, err, ErrBadJoin)
			assert.ErrorContains(t, err, `node "c": its join names the empty id, which 2 of its upstreams have`)

			one := NewWrapper("", okWorker(), 0)
			named := NewWrapper("named", okWorker(), 0)
			c := NewWrapper("c", okWorker(), 0).Depend(one, true).Depend(named, true).Join(j)
			a := newAsync(t)
			require.NoError(t, a.BeginWork(t.Context(), 0, one, named))
			assert.Equal(t, ResultSuccess, c.Result().State)
		})
	}
}

// TestH109EdgeToAPlansNodeNamesThePlan: an edge declared to or from a
// node compiled into a Plan was refused saying that node "was used in a
// run", which it never was, with no word of how to use a plan inside
// another graph. It says the node belongs to a compiled Plan, and names
// SubPlan.
func TestH109EdgeToAPlansNodeNamesThePlan(t *testing.T) {
	tpl := NewWrapper("tpl", okWorker(), 0)
	_, err := Compile(tpl)
	require.NoError(t, err)
	for _, link := range []func(f *WorkerWrapper[int, int]){
		func(f *WorkerWrapper[int, int]) { f.Depend(tpl, true) },
		func(f *WorkerWrapper[int, int]) { tpl.Next(f, true) },
	} {
		f := NewWrapper("fresh", okWorker(), 0)
		link(f)
		_, err := Describe(f)
		require.ErrorIs(t, err, ErrReused)
		assert.ErrorContains(t, err, `linking "tpl" -> "fresh": "tpl" belongs to a compiled Plan (a SubPlan node runs a plan inside another graph)`)
	}
	ran := NewWrapper("ran", okWorker(), 0)
	require.NoError(t, newAsync(t).BeginWork(t.Context(), 0, ran))
	f := NewWrapper("fresh", okWorker(), 0).Depend(ran, true)
	_, err = Describe(f)
	assert.ErrorContains(t, err, `Depend linking "ran" -> "fresh": "ran" was used in a run`)
}
