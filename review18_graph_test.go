package asynctool

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func s18gNop() WorkerFunc[int, int] {
	return func(context.Context, int, Wrappers) (int, error) { return 0, nil }
}

// TestS18GNamedJoinWide compiles a NamedSucceeded join over 2^15
// upstreams with long ids. Compile marked each in-edge by scanning the
// join's ids and checked each id by scanning the upstreams, n^2 string
// comparisons of a kilobyte each: minutes, where building must stay
// linear (a few milliseconds here). The bound is two orders of magnitude
// above the linear time, so the test is not a timing measurement: it
// only tells "returns" from "does not return".
func TestS18GNamedJoinWide(t *testing.T) {
	const n = 1 << 15
	prefix := strings.Repeat("x", 1024)
	sink := NewWrapper("sink", s18gNop(), 0)
	starts := make([]Wrapper, n)
	ids := make([]string, 0, n)
	for i := range n {
		id := prefix + strconv.Itoa(1e6+i)
		w := NewWrapper(id, s18gNop(), 0)
		sink.Depend(w, false)
		starts[i] = w
		if i%2 == 0 {
			ids = append(ids, id)
		}
	}
	sink.Join(NamedSucceeded(ids...))
	done := make(chan error, 1)
	var pl *Plan
	go func() {
		var err error
		pl, err = Compile(starts...)
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Compile of a wide NamedSucceeded join did not return in 30s")
	}
	require.Equal(t, n+1, pl.Len())
	sinkNode := &pl.p.nodes[sink.idx]
	assert.Equal(t, int32(n/2), sinkNode.nMust, "the named upstreams are must")
	assert.Equal(t, int32(n/2), sinkNode.nOpt, "the others are ignored")
}

// TestS18GNamedJoinManyIDs checks the named join's rules past the size
// where compile puts the ids in a set: which in-edges are must, and an id
// that is not an upstream (named in the error) or is named twice.
func TestS18GNamedJoinManyIDs(t *testing.T) {
	build := func(extra ...string) (*WorkerWrapper[int, int], []Wrapper, []*WorkerWrapper[int, int]) {
		sink := NewWrapper("sink", s18gNop(), 0)
		var ups []*WorkerWrapper[int, int]
		var starts []Wrapper
		var ids []string
		for i := range 20 {
			w := NewWrapper("u"+strconv.Itoa(i), s18gNop(), 0)
			sink.Depend(w, i%2 == 0) // declared flags are ignored
			ups = append(ups, w)
			starts = append(starts, w)
			if i < 12 {
				ids = append(ids, w.ID())
			}
		}
		sink.Join(NamedSucceeded(append(ids, extra...)...))
		return sink, starts, ups
	}

	sink, starts, _ := build("u3") // named twice
	pl, err := Compile(starts...)
	require.NoError(t, err)
	sn := &pl.p.nodes[sink.idx]
	assert.Equal(t, int32(12), sn.nMust)
	assert.Equal(t, int32(8), sn.nOpt)
	for _, v := range pl.p.in(sink.idx) {
		k, must := upstream(v)
		id := pl.p.nodes[k].core.id
		named, _ := strconv.Atoi(id[1:])
		assert.Equal(t, named < 12, must, id)
	}

	_, starts, _ = build("u7", "nope")
	_, err = Compile(starts...)
	var ge *GraphError
	require.ErrorAs(t, err, &ge)
	assert.ErrorIs(t, err, ErrBadJoin)
	assert.Equal(t, []string{"sink", "nope"}, ge.Nodes)

	// A failed named upstream fails the node; failed others do not.
	a := newAsync(t)
	sink = NewWrapper("sink", s18gNop(), 0)
	starts = nil
	var ids []string
	for i := range 20 {
		fail := i >= 12
		w := NewWrapper("u"+strconv.Itoa(i), WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			if fail {
				return 0, errBoom
			}
			return 1, nil
		}), 0)
		sink.Depend(w, true)
		starts = append(starts, w)
		if i < 12 {
			ids = append(ids, w.ID())
		}
	}
	sink.Join(NamedSucceeded(ids...))
	require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, starts...))
	assert.Equal(t, ResultSuccess, sink.Result().State, "%v", sink.Result().Err)
}
