package asynctool

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDefaultJoin checks rule 4 on graphs whose upstreams end in a fixed
// order (a manual executor runs one task at a time, in submission order).
func TestDefaultJoin(t *testing.T) {
	type dep struct {
		id   string
		must bool
		ok   bool
	}
	tests := []struct {
		name    string
		deps    []dep
		wantRun bool
		wantErr error // errors.Is target for c's Err when it did not run
	}{
		{"all must succeed", []dep{{"a", true, true}, {"b", true, true}}, true, nil},
		{"one must fails", []dep{{"a", true, true}, {"b", true, false}}, false, errBoom},
		{"first must fails", []dep{{"a", true, false}, {"b", true, true}}, false, errBoom},
		{"single must fails (asyncTool runs nothing either)", []dep{{"a", true, false}}, false, errBoom},
		{"optional failure is ignored", []dep{{"a", true, true}, {"b", false, false}}, true, nil},
		{"optional only: first fails, second succeeds", []dep{{"a", false, false}, {"b", false, true}}, true, nil},
		{"optional only: all fail", []dep{{"a", false, false}, {"b", false, false}}, false, errBoom},
		{"single optional fails (asyncTool fails c too)", []dep{{"a", false, false}}, false, errBoom},
		{"must succeeds, optional fails first", []dep{{"b", false, false}, {"a", true, true}}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := &manualExec{}
			a := newAsync(t, WithExecutor(ex))
			rec := newRecorder()
			c := rec.node("c", ok(7)).Default(-7)
			var starts []Wrapper
			for _, d := range tt.deps {
				fn := ok(1)
				if !d.ok {
					fn = fail(errBoom)
				}
				w := rec.node(d.id, fn).ShortCircuit(false)
				c.Depend(w, d.must)
				starts = append(starts, w)
			}
			r, err := a.Start(context.Background(), 0, starts...)
			require.NoError(t, err)
			ex.drain()
			require.NoError(t, r.Wait(context.Background()))

			got := c.Result()
			assert.Equal(t, tt.wantRun, rec.count(rec.actions, "c") == 1, "c ran")
			if tt.wantRun {
				assert.Equal(t, WorkResult[int]{Value: 7, State: ResultSuccess}, got)
				assert.Equal(t, StateFinish, c.State())
				return
			}
			assert.Equal(t, StateError, c.State())
			assert.Equal(t, ResultException, got.State)
			assert.ErrorIs(t, got.Err, tt.wantErr)
			var up *UpstreamError
			assert.ErrorAs(t, got.Err, &up, "c's error names the failed upstream")
			assert.Equal(t, -7, got.Value, "c that never ran ends with its default")
			assert.Equal(t, 1, rec.count(rec.results, "c"), "c's callback fired once")
			rec.mu.Lock()
			defer rec.mu.Unlock()
			assert.False(t, rec.success["c"], "c's callback was told it failed")
			assert.Equal(t, got, rec.res["c"], "c's callback got its result, default value included")
		})
	}
}

// TestMustFailureFailsAtOnce checks that a node fails as soon as one must
// dependency fails, while another is still running, in either declaration
// order.
func TestMustFailureFailsAtOnce(t *testing.T) {
	for _, slowFirst := range []bool{true, false} {
		a := newAsync(t)
		rec := newRecorder()
		gate, slowRunning := make(chan struct{}), make(chan struct{})
		releaseGate := releaser(t, gate) // the run has no deadline
		slow := rec.node("slow", func(ctx context.Context, w Wrappers) (int, error) {
			close(slowRunning)
			return gated(gate, 1)(ctx, w)
		})
		bad := rec.node("bad", func(context.Context, Wrappers) (int, error) {
			<-slowRunning
			return 0, errBoom
		})
		c := rec.node("c", ok(3))
		if slowFirst {
			c.Depend(slow, true).Depend(bad, true)
		} else {
			c.Depend(bad, true).Depend(slow, true)
		}
		r, err := a.Start(context.Background(), 0, slow, bad)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return rec.count(rec.results, "c") == 1 }, 10*time.Second, time.Millisecond)
		assert.Equal(t, StateWorking, slow.State(), "slow is still running when c fails")
		assert.ErrorIs(t, c.Result().Err, errBoom)
		releaseGate()
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, 0, rec.count(rec.actions, "c"))
	}
}

// TestOptionalDoesNotBlock checks that a node with a must dependency does
// not wait for an optional one still running.
func TestOptionalDoesNotBlock(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	gate, slowRunning := make(chan struct{}), make(chan struct{})
	releaseGate, releaseFast := releaser(t, gate), releaser(t, slowRunning) // the run has no deadline
	slow := rec.node("slow", gated(gate, 1))
	fast := rec.node("fast", gated(slowRunning, 2))
	c := rec.node("c", ok(3)).Depend(fast, true).Depend(slow, false)
	r, err := a.Start(context.Background(), 0, fast, slow)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slow.State() == StateWorking }, 10*time.Second, time.Millisecond)
	releaseFast()
	require.Eventually(t, func() bool { return c.State() == StateFinish }, 10*time.Second, time.Millisecond)
	assert.Equal(t, StateWorking, slow.State())
	releaseGate()
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultSuccess, slow.Result().State, "a started optional dependency is not cancelled")
}

// TestAllOptionalFailedJoinsErrors checks that an optional-only node that
// fails reports every upstream's error.
func TestAllOptionalFailedJoinsErrors(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	e1, e2 := errors.New("e1"), errors.New("e2")
	x := rec.node("x", fail(e1))
	y := rec.node("y", fail(e2))
	c := rec.node("c", ok(1)).Depend(x, false).Depend(y, false)
	require.NoError(t, a.BeginWork(context.Background(), 0, x, y))
	err := c.Result().Err
	assert.ErrorIs(t, err, e1)
	assert.ErrorIs(t, err, e2)
}

// TestDependAndNextAreTheSameEdge checks that a.Next(b) equals b.Depend(a)
// and that declaring an edge twice the same way is harmless.
func TestDependAndNextAreTheSameEdge(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	x := rec.node("x", fail(errBoom))
	y := rec.node("y", ok(1))
	z := rec.node("z", ok(2))
	x.Next(z, true)
	z.Depend(x, true).Depend(y, true)
	y.Next(z, true)
	require.NoError(t, a.BeginWork(context.Background(), 0, x, y))
	assert.ErrorIs(t, z.Result().Err, errBoom, "x is a must dependency of z")
	assert.Equal(t, 0, rec.count(rec.actions, "z"))
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[Decision]string{
		DecideWait: "wait", DecideRun: "run", DecideFail: "fail", DecideSuspend: "suspend", Decision(7): "Decision(7)",
	} {
		assert.Equal(t, want, d.String())
	}
}

// TestCustomJoinOnAStartNodeIsRefused: a start node has no upstreams,
// so its CustomJoin is never asked: the node ran as if it had none, even
// when fn would have failed or skipped it. Compile now refuses it with
// ErrBadJoin naming the node, as it refuses AtLeast(1), NamedSucceeded
// and When on such a node, and nothing runs.
func TestCustomJoinOnAStartNodeIsRefused(t *testing.T) {
	a := newAsync(t)
	var asked, ran atomic.Int32
	c := NewWrapper("gate", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		ran.Add(1)
		return 1, nil
	}), 0).Join(CustomJoin(func([]Upstream) Decision { asked.Add(1); return DecideFail }))
	err := a.BeginWork(context.Background(), time.Second, c)
	require.ErrorIs(t, err, ErrBadJoin, "got %v, want ErrBadJoin", err)
	var ge *GraphError
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, []string{"gate"}, ge.Nodes)
	assert.Contains(t, err.Error(), `"gate"`)
	assert.Zero(t, ran.Load(), "the node ran")
	assert.Zero(t, asked.Load())

	// With an upstream it is asked, and decides.
	u := NewWrapper("u", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	d := NewWrapper("d", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		ran.Add(1)
		return 1, nil
	}), 0).Depend(u, true).Join(CustomJoin(func([]Upstream) Decision { asked.Add(1); return DecideFail }))
	require.NoError(t, a.BeginWork(context.Background(), time.Second, u))
	assert.ErrorIs(t, d.Result().Err, ErrJoinFailed)
	assert.Equal(t, int32(1), asked.Load())
	assert.Zero(t, ran.Load())
}

// TestNamedJoinShowsItsIDsQuoted: a NamedSucceeded join was shown as
// its ids printed with %v, so NamedSucceeded("a b") and
// NamedSucceeded("a", "b") both read "named [a b] succeeded" under the
// node in DOT, Mermaid and the report, and a join naming the empty id
// (which names the node's anonymous upstreams) read "named []
// succeeded", as if it named none. They are quoted, as a When join's id
// is.
func TestNamedJoinShowsItsIDsQuoted(t *testing.T) {
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

// TestJoinNamingTheEmptyIDOfManyUpstreams: a join that names the
// empty id of a node with several anonymous upstreams was accepted:
// When("") and WhenResult("") then asked their condition about whichever
// of them came first in the plan's order (not the order they were
// declared in), and NamedSucceeded("") waited for all of them. Such a
// join names no one upstream, and is refused; with one anonymous
// upstream it still names that one.
func TestJoinNamingTheEmptyIDOfManyUpstreams(t *testing.T) {
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

// TestOptionalBranchReadiedWithItsSuccessorIsSkipped pins down what the
// README says of the enrichment shape user → recs -.-> page ← user: the
// end of user readies recs and completes page's must dependencies in one
// step, so recs, not started, is skipped, unless ShortCircuit(false).
func TestOptionalBranchReadiedWithItsSuccessorIsSkipped(t *testing.T) {
	for _, short := range []bool{true, false} {
		a := newAsync(t)
		one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
		var calls atomic.Int32
		user := NewWrapper("user", one, 0)
		recs := NewWrapper("recs", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			calls.Add(1)
			return 2, nil
		}), 0).Depend(user, true).ShortCircuit(short)
		page := NewWrapper("page", one, 0).Depend(user, true).Depend(recs, false)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, user))
		assert.Equal(t, ResultSuccess, page.Result().State)
		if short {
			assert.Zero(t, calls.Load(), "recs was skipped")
			assert.ErrorIs(t, recs.Result().Err, ErrSkipped)
		} else {
			assert.Equal(t, int32(1), calls.Load(), "recs ran")
		}
	}
}

// A custom join that returns a value that is not a Decision fails its
// node, as a panicking join does. It counted as decided without acting,
// so the join was never asked again and the node, neither run nor
// failed, kept the run open for ever (with no deadline).
func TestCustomJoinUnknownDecisionFailsTheNode(t *testing.T) {
	a := newAsync(t)
	rec := newRecorder()
	u1 := rec.node("u1", ok(1))
	u2 := rec.node("u2", ok(2))
	c := rec.node("c", ok(3)).Depend(u1, true).Depend(u2, true).
		Join(CustomJoin(func([]Upstream) Decision { return Decision(42) }))
	r, err := a.Start(context.Background(), 0, u1, u2)
	require.NoError(t, err)
	t.Cleanup(r.Cancel) // before newAsync's Close, if the run hangs
	requireEnds(t, r, "the run hangs on a join that returned Decision(42)")
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, ResultException, c.Result().State)
	assert.ErrorContains(t, c.Result().Err, "Decision(42)")
	assert.Zero(t, rec.count(rec.actions, "c"))
	// Its worker never ran: the report says the join failed it.
	assert.Contains(t, r.Report().Nodes[indexOf(r, "c")].Reason, "custom join failed")
}

// TestNamedSucceededCopiesItsIDs checks that NamedSucceeded keeps its own
// copy of the ids: a caller that reuses its slice afterwards (a loop that
// builds several joins from one buffer) used to change the join.
func TestNamedSucceededCopiesItsIDs(t *testing.T) {
	a := newAsync(t)
	fail := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errors.New("down") })
	good := NewWrapper("good", okWorker(), 0)
	bad := NewWrapper("bad", fail, 0)
	ids := []string{"good"}
	x := NewWrapper("x", okWorker(), 0).Depend(good, false).Depend(bad, false).Join(NamedSucceeded(ids...))
	ids[0] = "bad" // reused by the caller
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, good, bad))
	assert.Equal(t, ResultSuccess, x.Result().State, "x waits on good, as it was told when the join was made")
	names := []string{"good"}
	j := NamedSucceeded(names...)
	before := j.String()
	names[0] = "bad"
	assert.Equal(t, before, j.String(), "a join's name does not change with the caller's slice")
}

func dependNop() WorkerFunc[int, int] {
	return func(context.Context, int, Wrappers) (int, error) { return 0, nil }
}

// TestNamedJoinWide compiles a NamedSucceeded join over 2^15
// upstreams with long ids. Compile marked each in-edge by scanning the
// join's ids and checked each id by scanning the upstreams, n^2 string
// comparisons of a kilobyte each: minutes, where building must stay
// linear (a few milliseconds here). The bound is two orders of magnitude
// above the linear time, so the test is not a timing measurement: it
// only tells "returns" from "does not return".
func TestNamedJoinWide(t *testing.T) {
	const n = 1 << 15
	prefix := strings.Repeat("x", 1024)
	sink := NewWrapper("sink", dependNop(), 0)
	starts := make([]Wrapper, n)
	ids := make([]string, 0, n)
	for i := range n {
		id := prefix + strconv.Itoa(1e6+i)
		w := NewWrapper(id, dependNop(), 0)
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

// TestNamedJoinManyIDs checks the named join's rules past the size
// where compile puts the ids in a set: which in-edges are must, and an id
// that is not an upstream (named in the error) or is named twice.
func TestNamedJoinManyIDs(t *testing.T) {
	build := func(extra ...string) (*WorkerWrapper[int, int], []Wrapper, []*WorkerWrapper[int, int]) {
		sink := NewWrapper("sink", dependNop(), 0)
		var ups []*WorkerWrapper[int, int]
		var starts []Wrapper
		var ids []string
		for i := range 20 {
			w := NewWrapper("u"+strconv.Itoa(i), dependNop(), 0)
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
	sink = NewWrapper("sink", dependNop(), 0)
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

// TestSlowCustomJoinDoesNotHoldTheSweep: a custom join runs under its
// node's join lock; the sweep, which locks the node's timers, must not
// wait for it. A node the sweep ends at the deadline gets its Result
// callback then, and the run ends when the join returns (like a Result
// callback, the join is part of its upstream's end, which the run waits
// for). Before the two locks were split, the sweep waited on the join
// (under synctest: forever, as a mutex wait is not durably blocked).
func TestSlowCustomJoinDoesNotHoldTheSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		t0 := time.Now()
		var swept time.Duration
		up := NewWrapper("up", okWorker(), 0)
		NewWrapper("slowjoin", okWorker(), 0).Depend(up, true).
			Join(CustomJoin(func([]Upstream) Decision { time.Sleep(5 * time.Second); return DecideRun }))
		waiter := NewWrapper("waiter", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0).Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { swept = time.Since(t0) }))
		err := a.BeginWork(context.Background(), time.Second, up, waiter)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, swept, "the sweep ended waiter at the deadline")
		assert.Equal(t, 5*time.Second, time.Since(t0), "the run waited for the join")
		assert.Equal(t, ResultTimeout, waiter.Result().State)
	})
}
