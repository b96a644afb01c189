package asynctooltest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spy is a testing.TB that records failures instead of failing.
type spy struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  bool
}

func (s *spy) Helper() {}

func (s *spy) Errorf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors = append(s.errors, fmt.Sprintf(format, args...))
}

func (s *spy) Fatalf(format string, args ...any) {
	s.Errorf(format, args...)
	s.fatal = true
	runtime.Goexit()
}

// onSpy runs f with a spy on its own goroutine, so that Fatalf can end it.
func onSpy(t *testing.T, f func(s *spy)) *spy {
	s := &spy{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(s)
	}()
	<-done
	return s
}

// story is a run with one node of each kind, under fake time:
//
//	a (10ms) ─must─> b (fails at once) ─must─> c (never starts)
//	first (1ms) ┄┐
//	spare       ┄┴─> any    (spare is skipped once first triggers any)
//	slow (1h) times out at the 1s deadline
//	route ("db") ─> cache (When route == "cache") ─must─> parse
//	                          (cache is not taken, nor parse after it)
func story(t *testing.T) *asynctool.Report {
	var rep *asynctool.Report
	synctest.Test(t, func(t *testing.T) {
		a := asynctool.NewWrapper("a", asynctooltest.Sleeps[int](10*time.Millisecond, 1), 0)
		b := asynctool.NewWrapper("b", asynctooltest.Fails[int, int](errDown), 0).Depend(a, true)
		asynctool.NewWrapper("c", asynctooltest.Returns[int](3), 0).Depend(b, true)
		first := asynctool.NewWrapper("first", asynctooltest.Sleeps[int](time.Millisecond, 1), 0)
		spareUp := asynctool.NewWrapper("spare-up", asynctooltest.Sleeps[int](time.Minute, 1), 0)
		spare := asynctool.NewWrapper("spare", asynctooltest.Returns[int](1), 0).Depend(spareUp, true)
		asynctool.NewWrapper("any", asynctooltest.Returns[int](1), 0).Depend(first, false).Depend(spare, false)
		slow := asynctool.NewWrapper("slow", asynctooltest.Sleeps[int](time.Hour, 1), 0)
		route := asynctool.NewWrapper("route", asynctooltest.Returns[int]("db"), 0)
		cache := asynctool.NewWrapper("cache", asynctooltest.Returns[int](1), 0).Depend(route, true).
			Join(asynctool.When("route", func(v string) bool { return v == "cache" }))
		asynctool.NewWrapper("parse", asynctooltest.Returns[int](2), 0).Depend(cache, true)
		rep = asynctooltest.RunWithin(t, time.Second, a, first, spareUp, slow, route)
	})
	return rep
}

func TestAssertionsHold(t *testing.T) {
	rep := story(t)
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.RanBefore(s, rep, "a", "b"))
		assert.True(t, asynctooltest.RanOnce(s, rep, "a"))
		assert.True(t, asynctooltest.Succeeded(s, rep, "a"))
		assert.True(t, asynctooltest.Failed(s, rep, "b", errDown))
		assert.True(t, asynctooltest.Failed(s, rep, "c", errDown), "through the UpstreamError")
		assert.True(t, asynctooltest.Failed(s, rep, "c", nil))
		assert.True(t, asynctooltest.NeverStarted(s, rep, "c"))
		assert.True(t, asynctooltest.WasSkipped(s, rep, "spare"))
		assert.True(t, asynctooltest.NeverStarted(s, rep, "spare"))
		assert.True(t, asynctooltest.TimedOut(s, rep, "slow"))
		assert.True(t, asynctooltest.Failed(s, rep, "slow", nil))
		assert.True(t, asynctooltest.NotTaken(s, rep, "cache"))
		assert.True(t, asynctooltest.NotTaken(s, rep, "parse"), "its must upstream was not taken")
		assert.True(t, asynctooltest.NeverStarted(s, rep, "cache"))
		assert.True(t, asynctooltest.Failed(s, rep, "cache", asynctool.ErrNotTaken), "it ends in error")
	})
	assert.Empty(t, s.errors)
}

func TestAssertionsFail(t *testing.T) {
	rep := story(t)
	tests := []struct {
		name  string
		check func(s *spy) bool
		want  string
	}{
		{"ran before, reversed", func(s *spy) bool { return asynctooltest.RanBefore(s, rep, "b", "a") }, `"b" ended 10ms after "a" started, want it to end before`},
		{"ran before, overlapping", func(s *spy) bool { return asynctooltest.RanBefore(s, rep, "a", "first") }, `"a" ended 10ms after "first" started, want it to end before`},
		{"ran before, did not run", func(s *spy) bool { return asynctooltest.RanBefore(s, rep, "a", "c") }, `"c" did not run (error/exception), want it to run before or after "a"`},
		{"ran once, never ran", func(s *spy) bool { return asynctooltest.RanOnce(s, rep, "c") }, `"c" ran 0 times, want once`},
		{"never started, ran", func(s *spy) bool { return asynctooltest.NeverStarted(s, rep, "a") }, `"a" started (1 times, ended finish/success), want it never to start`},
		{"skipped, failed", func(s *spy) bool { return asynctooltest.WasSkipped(s, rep, "c") }, `"c" ended error/exception, ran=false, err=asynctool: upstream "b" failed: down, want it skipped`},
		{"succeeded, failed", func(s *spy) bool { return asynctooltest.Succeeded(s, rep, "b") }, `"b" ended error/exception (worker failed, err=down), want finish/success`},
		{"failed, succeeded", func(s *spy) bool { return asynctooltest.Failed(s, rep, "a", nil) }, `"a" ended finish/success, want error`},
		{"failed, other error", func(s *spy) bool { return asynctooltest.Failed(s, rep, "b", asynctool.ErrSkipped) }, `"b" failed with down, want an error matching ` + asynctool.ErrSkipped.Error()},
		{"not taken, skipped", func(s *spy) bool { return asynctooltest.NotTaken(s, rep, "spare") }, `"spare" ended error/exception, ran=false, err=asynctool: skipped: no successor needs this node, want it not taken`},
		{"not taken, failed upstream", func(s *spy) bool { return asynctooltest.NotTaken(s, rep, "c") }, `"c" ended error/exception, ran=false, err=asynctool: upstream "b" failed: down, want it not taken`},
		{"not taken, succeeded", func(s *spy) bool { return asynctooltest.NotTaken(s, rep, "a") }, `"a" ended finish/success, ran=true, err=<nil>, want it not taken`},
		{"skipped, not taken", func(s *spy) bool { return asynctooltest.WasSkipped(s, rep, "cache") }, `"cache" ended error/exception, ran=false, err=asynctool: not taken: the branch was not chosen, want it skipped`},
		{"timed out, succeeded", func(s *spy) bool { return asynctooltest.TimedOut(s, rep, "a") }, `"a" ended finish/success (err=<nil>), want timeout`},
		{"timed out, failed", func(s *spy) bool { return asynctooltest.TimedOut(s, rep, "b") }, `"b" ended error/exception (err=down), want timeout`},
		{"unknown id", func(s *spy) bool { return asynctooltest.Succeeded(s, rep, "spaer") }, `asynctooltest: no node "spaer" in the report (its paths: a, b, c, first, spare-up, spare, any, slow, route, cache, parse)`},
		{"nil report", func(s *spy) bool { return asynctooltest.RanOnce(s, nil, "a") }, `asynctooltest: nil report`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ok bool
			s := onSpy(t, func(s *spy) { ok = tt.check(s) })
			assert.False(t, ok)
			require.Len(t, s.errors, 1)
			assert.Equal(t, tt.want, s.errors[0])
		})
	}
}

// TestMarkersAreTheSentinels checks that NotTaken and WasSkipped want
// the node's error to be asynctool.ErrNotTaken or asynctool.ErrSkipped
// itself, as the library stores it, and the node not to have run: a
// worker that returned it, or an error that wraps it, is a failure.
func TestMarkersAreTheSentinels(t *testing.T) {
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
		{ID: "ran", Ran: true, Attempts: 1, State: asynctool.StateError, Result: asynctool.ResultException, Err: asynctool.ErrNotTaken},
		{ID: "wrapped", State: asynctool.StateError, Result: asynctool.ResultException, Err: fmt.Errorf("join: %w", asynctool.ErrNotTaken)},
		{ID: "ran-skip", Ran: true, Attempts: 1, State: asynctool.StateError, Result: asynctool.ResultException, Err: asynctool.ErrSkipped},
		{ID: "wrapped-skip", State: asynctool.StateError, Result: asynctool.ResultException, Err: fmt.Errorf("join: %w", asynctool.ErrSkipped)},
		// A report built or decoded by hand whose result is not the
		// exception a branch not taken ends with.
		{ID: "not-ended", Err: asynctool.ErrNotTaken},
	}}
	tests := []struct {
		id    string
		check func(testing.TB, *asynctool.Report, string) bool
		want  string
	}{
		{"ran", asynctooltest.NotTaken, `"ran" ended error/exception, ran=true, err=asynctool: not taken: the branch was not chosen, want it not taken`},
		{"wrapped", asynctooltest.NotTaken, `"wrapped" ended error/exception, ran=false, err=join: asynctool: not taken: the branch was not chosen, want it not taken`},
		{"ran-skip", asynctooltest.WasSkipped, `"ran-skip" ended error/exception, ran=true, err=asynctool: skipped: no successor needs this node, want it skipped`},
		{"not-ended", asynctooltest.NotTaken, `"not-ended" ended init/default, ran=false, err=asynctool: not taken: the branch was not chosen, want it not taken`},
		{"wrapped-skip", asynctooltest.WasSkipped, `"wrapped-skip" ended error/exception, ran=false, err=join: asynctool: skipped: no successor needs this node, want it skipped`},
	}
	for _, tt := range tests {
		var ok bool
		s := onSpy(t, func(s *spy) { ok = tt.check(s, rep, tt.id) })
		assert.False(t, ok, tt.id)
		require.Len(t, s.errors, 1, tt.id)
		assert.Equal(t, tt.want, s.errors[0])
	}
}

// TestResumedWithTheSkipMarkerFailed checks WasSkipped on a real run: a
// pending node resumed with FailWith(ErrSkipped) never started, and its
// error wraps ErrSkipped, but it failed; it was not short-circuited.
func TestResumedWithTheSkipMarkerFailed(t *testing.T) {
	a := asynctool.New()
	defer a.Close()
	up := asynctool.NewWrapper("up", asynctooltest.Returns[int](1), 0)
	asynctool.NewWrapper("held", asynctooltest.Returns[int](2), 0).Depend(up, true).
		Join(asynctool.CustomJoin(func([]asynctool.Upstream) asynctool.Decision { return asynctool.DecideSuspend }))
	r, err := a.Start(context.Background(), time.Minute, up)
	require.NoError(t, err)
	<-r.Suspended()
	require.NoError(t, r.Resume("held", asynctool.FailWith(asynctool.ErrSkipped)))
	require.NoError(t, r.Wait(context.Background()))
	rep := r.Report()
	var ok bool
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.NeverStarted(s, rep, "held"))
		assert.True(t, asynctooltest.Failed(s, rep, "held", asynctool.ErrSkipped))
		ok = asynctooltest.WasSkipped(s, rep, "held")
	})
	assert.False(t, ok, "a failure is not a skip")
	require.Len(t, s.errors, 1)
	assert.Contains(t, s.errors[0], "want it skipped")
}

// TestRanBeforeNeedsTimes checks the message for a report without times.
func TestRanBeforeNeedsTimes(t *testing.T) {
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: "a", Ran: true}, {ID: "b", Ran: true}}}
	s := onSpy(t, func(s *spy) { asynctooltest.RanBefore(s, rep, "a", "b") })
	require.Len(t, s.errors, 1)
	assert.Contains(t, s.errors[0], `the report has no times for "a"`)
}

// RanBefore names the nodes in its failures as the test named them, a
// path or "#" and an index, not by their bare ids; and in a report of a
// run going on, it holds for a b still running, and fails for an a that
// has not ended, saying so rather than that the report has no times.
func TestRanBeforeNamesNodesAsGiven(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
		{ID: "sub", Index: 0, Ran: true, Attempts: 1, Status: asynctool.StatusRunning, State: asynctool.StateWorking, Started: at(0),
			Sub: &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: "x", Status: asynctool.StatusWaiting}}}},
		{Index: 1, Status: asynctool.StatusWaiting},
		{ID: "done", Index: 2, Ran: true, Attempts: 1, Status: asynctool.StatusSucceeded, State: asynctool.StateFinish, Result: asynctool.ResultSuccess, Started: at(0), Ended: at(5)},
		{ID: "late", Index: 3, Ran: true, Attempts: 1, Status: asynctool.StatusRunning, State: asynctool.StateWorking, Started: at(10)},
	}}
	for _, tt := range []struct{ a, b, want string }{
		{"sub/x", "done", `"sub/x" did not run (init/default), want it to run before or after "done"`},
		{"done", "sub/x", `"sub/x" did not run (init/default), want it to run before or after "done"`},
		{"done", "#1", `"#1" did not run (init/default), want it to run before or after "done"`},
		{"late", "done", `"late" has not ended (running), want it to end before "done" started`},
	} {
		var ok bool
		s := onSpy(t, func(s *spy) { ok = asynctooltest.RanBefore(s, rep, tt.a, tt.b) })
		assert.False(t, ok, "%s before %s", tt.a, tt.b)
		assert.Equal(t, []string{tt.want}, s.errors)
	}
	s := onSpy(t, func(s *spy) { assert.True(t, asynctooltest.RanBefore(s, rep, "done", "late")) })
	assert.Empty(t, s.errors, "b is still running, and started after a ended")
}

// TimedOut holds for an item its ForEach's Budget stopped, named by its
// path, as its doc says; Succeeded for the node that went on.
func TestTimedOutForABudgetStoppedItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prices := asynctool.NewWrapper("prices", asynctool.ForEach[int, int, int]{
			Items: func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: asynctool.WorkerFunc[int, int](func(ctx context.Context, i int, _ asynctool.Wrappers) (int, error) {
				select {
				case <-time.After(time.Duration(1+i*1000) * time.Millisecond):
					return i, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}),
			Budget: 50 * time.Millisecond,
		}, 0)
		rep := asynctooltest.RunWithin(t, time.Minute, prices)
		asynctooltest.Succeeded(t, rep, "prices")
		asynctooltest.Succeeded(t, rep, "prices/0")
		asynctooltest.TimedOut(t, rep, "prices/1")
		var be *asynctool.BudgetError
		assert.True(t, errors.As(prices.Result().Value[1].Err, &be))
	})
}

// assertPrices is a ForEach of three items with a Join.
func assertPrices() asynctool.ForEach[int, int, int] {
	return asynctool.ForEach[int, int, int]{
		Items:  func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
		Worker: asynctooltest.Func(func(_ context.Context, i int) (int, error) { return i * 10, nil }),
		Join:   asynctool.AllSucceeded(),
		Budget: time.Minute,
	}
}

// A ForEach's static shape, in a snapshot taken before the node starts,
// is reached by path like its items later are: "prices/join" and
// "prices/each item" name its nodes, all not started; "prices/2", an item
// not known yet, is no node, and the failure lists the paths there are.
// Once the run has ended, the paths are the items'.
func TestPathsIntoAStaticForEach(t *testing.T) {
	gate := asynctooltest.Blocks[int, int](1)
	g := asynctool.NewWrapper("gate", gate, 0)
	prices := asynctool.NewWrapper("prices", assertPrices(), 0)
	prices.Depend(g, true)
	run := asynctooltest.Start(t, time.Minute, g)
	<-gate.Started()
	rep := run.Report()
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.NeverStarted(s, rep, "prices/join"))
		assert.True(t, asynctooltest.NeverStarted(s, rep, "prices/each item"))
		assert.False(t, asynctooltest.Succeeded(s, rep, "prices/join"))
		assert.False(t, asynctooltest.NeverStarted(s, rep, "prices/2"))
	})
	require.Len(t, s.errors, 2)
	assert.Contains(t, s.errors[0], `"prices/join" ended`)
	assert.Contains(t, s.errors[1], `no node "prices/2" in the report (its paths: gate, prices, prices/each item, prices/join)`)

	gate.Release()
	require.NoError(t, run.Wait(context.Background()))
	rep = run.Report()
	s = onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.Succeeded(s, rep, "prices/2"))
		assert.True(t, asynctooltest.Succeeded(s, rep, "prices/join"))
		assert.False(t, asynctooltest.NeverStarted(s, rep, "prices/each item"))
	})
	require.Len(t, s.errors, 1)
	assert.True(t, strings.Contains(s.errors[0], `no node "prices/each item"`), s.errors[0])
}

// The empty id, alone or at the end of a path, names no node: before, it
// named the first node without an id, so that Succeeded held for "" in a
// run whose other anonymous node failed.
func TestEmptyIDNamesNoNode(t *testing.T) {
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
		{Index: 0, State: asynctool.StateFinish, Result: asynctool.ResultSuccess, Status: asynctool.StatusSucceeded},
		{Index: 1, State: asynctool.StateError, Result: asynctool.ResultException, Status: asynctool.StatusFailed, Err: errDown},
		{ID: "sub", Index: 2, State: asynctool.StateFinish, Result: asynctool.ResultSuccess, Status: asynctool.StatusSucceeded,
			Sub: &asynctool.Report{Nodes: []asynctool.NodeReport{{Index: 0, State: asynctool.StateFinish, Result: asynctool.ResultSuccess}}}},
	}}
	for id, want := range map[string]string{
		"":     `asynctooltest: no node "" in the report: name a node without an id by "#" and its index (its paths: #0, #1, sub, sub/#0)`,
		"sub/": `asynctooltest: no node "sub/" in the report: name a node without an id by "#" and its index (its paths: #0, #1, sub, sub/#0)`,
	} {
		var ok bool
		s := onSpy(t, func(s *spy) { ok = asynctooltest.Succeeded(s, rep, id) })
		assert.False(t, ok, id)
		assert.Equal(t, []string{want}, s.errors)
	}
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.Succeeded(s, rep, "#0"))
		assert.True(t, asynctooltest.Failed(s, rep, "#1", errDown))
		assert.True(t, asynctooltest.Succeeded(s, rep, "sub/#0"))
	})
	assert.Empty(t, s.errors)
}

// A failure lists at most 20 paths, and "..." only when there are more:
// before, a report of exactly 20 nodes ended its list with "..." too.
func TestMissingPathListsAtMostTwentyPaths(t *testing.T) {
	withNodes := func(n int) *asynctool.Report {
		rep := &asynctool.Report{}
		for i := range n {
			rep.Nodes = append(rep.Nodes, asynctool.NodeReport{ID: strconv.Itoa(i), Index: i})
		}
		return rep
	}
	var twenty []string
	for i := range 20 {
		twenty = append(twenty, strconv.Itoa(i))
	}
	for n, list := range map[int]string{
		20: strings.Join(twenty, ", "),
		21: strings.Join(twenty, ", ") + ", ...",
	} {
		s := onSpy(t, func(s *spy) { asynctooltest.Succeeded(s, withNodes(n), "a/b") })
		assert.Equal(t, []string{`asynctooltest: no node "a/b" in the report (its paths: ` + list + `)`}, s.errors, "%d nodes", n)
	}
}

// A node without an id is named "#" and its index, as Run.Resume and the
// report's pictures name it, in a path too; a node whose id is "#1" keeps
// that name. A failure lists such nodes by that name.
func TestAnonymousNodesByIndex(t *testing.T) {
	inner := asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
		n := asynctool.NewWrapper("", asynctooltest.Returns[int](7), 0)
		return asynctool.Built[int]{Starts: []asynctool.Wrapper{n}, Output: func() (int, error) { r := n.Result(); return r.Value, r.Err }}, nil
	}}
	anon := asynctool.NewWrapper("", asynctooltest.Returns[int](1), 0)
	hash := asynctool.NewWrapper("#1", asynctooltest.Fails[int, int](errDown), 0)
	sub := asynctool.NewWrapper("sub", inner, 0)
	anonSub := asynctool.NewWrapper("", inner, 0) // its sub-run's nodes are "#3/..."
	rep := asynctooltest.Run(t, anon, hash, sub, anonSub)
	s := onSpy(t, func(s *spy) {
		assert.True(t, asynctooltest.Succeeded(s, rep, "#0"))
		assert.True(t, asynctooltest.Failed(s, rep, "#1", errDown), "the id #1, not node 1")
		assert.True(t, asynctooltest.Succeeded(s, rep, "sub/#0"))
		assert.True(t, asynctooltest.Succeeded(s, rep, "#3/#0"), "a node of an anonymous node's sub-run")
		assert.False(t, asynctooltest.Succeeded(s, rep, "sub/#1"))
	})
	require.Len(t, s.errors, 1)
	assert.Contains(t, s.errors[0], `no node "sub/#1" in the report (its paths: #0, #1, sub, sub/#0, #3, #3/#0)`)
}

// RanBefore fails for two nodes that ended and started in one instant
// (instant fakes under synctest) when a must dependency makes the first
// run after the second, directly or through another node, also in a
// sub-run: it held in either order, a check that could not fail. A tie
// with no must path between the nodes still holds, as its doc says.
func TestRanBeforeTieFollowsMustDependencies(t *testing.T) {
	var rep *asynctool.Report
	synctest.Test(t, func(t *testing.T) {
		cart := asynctool.NewWrapper("cart", asynctooltest.Returns[int](1), 0)
		prices := asynctool.NewWrapper("prices", asynctooltest.Returns[int](2), 0).Depend(cart, true)
		asynctool.NewWrapper("page", asynctooltest.Returns[int](3), 0).Depend(prices, true)
		other := asynctool.NewWrapper("other", asynctooltest.Returns[int](4), 0).ShortCircuit(false) // runs though banner may not wait for it
		asynctool.NewWrapper("banner", asynctooltest.Returns[int](5), 0).Depend(other, false).Depend(cart, true)
		sub := asynctool.NewWrapper("sub", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			x := asynctool.NewWrapper("x", asynctooltest.Returns[int](1), 0)
			y := asynctool.NewWrapper("y", asynctooltest.Returns[int](2), 0).Depend(x, true)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{x}, Output: func() (int, error) {
				r := y.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0)
		rep = asynctooltest.Run(t, cart, other, sub)
	})
	for _, tt := range []struct{ a, b, want string }{
		{"prices", "cart", `"prices" ended in the instant "cart" started, and it must depend on "cart", so it ran after it`},
		{"page", "cart", `"page" ended in the instant "cart" started, and it must depend on "cart", so it ran after it`},
		{"sub/y", "sub/x", `"sub/y" ended in the instant "sub/x" started, and it must depend on "sub/x", so it ran after it`},
	} {
		var ok bool
		s := onSpy(t, func(s *spy) { ok = asynctooltest.RanBefore(s, rep, tt.a, tt.b) })
		assert.False(t, ok, "%s before %s", tt.a, tt.b)
		assert.Equal(t, []string{tt.want}, s.errors)
	}
	for _, tt := range []struct{ a, b string }{
		{"cart", "prices"},  // the order the dependency gives
		{"other", "banner"}, // an optional dependency: no order follows from it
		{"banner", "other"},
		{"cart", "sub/x"}, // not of the same graph
		{"sub/x", "cart"},
		{"prices", "sub/x"}, // prices must depend on node 0, cart, not on sub/x, node 0 of another graph
	} {
		s := onSpy(t, func(s *spy) { assert.True(t, asynctooltest.RanBefore(s, rep, tt.a, tt.b), "%s before %s", tt.a, tt.b) })
		assert.Empty(t, s.errors)
	}
}
