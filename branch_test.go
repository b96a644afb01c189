package asynctool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// route builds a string node that returns v.
func route(id, v string) *WorkerWrapper[int, string] {
	return NewWrapper(id, WorkerFunc[int, string](func(context.Context, int, Wrappers) (string, error) {
		return v, nil
	}), 0)
}

func isRoute(want string) func(string) bool {
	return func(v string) bool { return v == want }
}

// TestWhenSwitch checks a switch: of three branches on one upstream's
// value only the chosen one runs; the others are not taken, with their
// default values and callbacks, no Begin and no Action, and are reported
// as skipped with the reason.
func TestWhenSwitch(t *testing.T) {
	for _, choice := range []string{"cache", "db", "none"} {
		t.Run(choice, func(t *testing.T) {
			a := newAsync(t)
			rec := newRecorder()
			r := route("route", choice)
			cache := rec.node("cache", ok(1)).Default(-1).Depend(r, true).Join(When("route", isRoute("cache")))
			db := rec.node("db", ok(2)).Default(-2).Depend(r, true).Join(When("route", isRoute("db")))
			require.NoError(t, a.BeginWork(context.Background(), 0, r))

			for _, c := range []struct {
				w     *WorkerWrapper[int, int]
				taken bool
				v     int
			}{{cache, choice == "cache", 1}, {db, choice == "db", 2}} {
				id := c.w.ID()
				res := c.w.Result()
				if c.taken {
					assert.Equal(t, WorkResult[int]{Value: c.v, State: ResultSuccess}, res, id)
					assert.Equal(t, 1, rec.count(rec.actions, id), id)
					assert.True(t, rec.success[id], id)
					continue
				}
				assert.Equal(t, WorkResult[int]{Value: -c.v, State: ResultException, Err: ErrNotTaken}, res, id)
				assert.Equal(t, StateError, c.w.State(), id)
				assert.Zero(t, rec.count(rec.actions, id), "%s ran", id)
				assert.Zero(t, rec.count(rec.begins, id), "%s began", id)
				assert.Equal(t, 1, rec.count(rec.results, id), "%s's Result callback", id)
				assert.False(t, rec.success[id], id)
			}
		})
	}
}

// TestWhenReport checks how a run's report shows a node not taken and
// one not taken because its upstream was not.
func TestWhenReport(t *testing.T) {
	a := newAsync(t)
	r := route("route", "db")
	cache := NewWrapper("cache", okWorker(), 0).Depend(r, true).Join(When("route", isRoute("cache")))
	NewWrapper("parse", okWorker(), 0).Depend(cache, true)
	run, err := a.Start(context.Background(), 0, r)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	rep := run.Report()
	c, p := nodeReport(t, rep, "cache"), nodeReport(t, rep, "parse")
	assert.Equal(t, StatusSkipped, c.Status)
	assert.Equal(t, `not taken: join when "route" decided so`, c.Reason)
	assert.Equal(t, "route", c.DecidedBy)
	assert.False(t, c.Ran)
	assert.Equal(t, StatusSkipped, p.Status)
	assert.Equal(t, `upstream "cache" was not taken`, p.Reason)
	assert.Equal(t, "cache", p.DecidedBy)
	assert.Equal(t, ErrNotTaken, p.Err)
	assert.Contains(t, rep.DOT(), "not taken")
	assert.Contains(t, rep.String(), "cache: skipped by=route (not taken: join when \"route\" decided so)")
}

// nodeReport returns the node with the given id in rep.
func nodeReport(t *testing.T, rep *Report, id string) NodeReport {
	t.Helper()
	for _, n := range rep.Nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("no node %q in the report", id)
	return NodeReport{}
}

// TestNotTakenPropagates checks what each join does with an upstream
// that was not taken.
func TestNotTakenPropagates(t *testing.T) {
	type outcome struct {
		ran bool
		err error // nil: succeeded
	}
	notTaken := outcome{err: ErrNotTaken}
	ran := outcome{ran: true}
	tests := []struct {
		name string
		// build adds node "x" downstream of skipped (not taken), good
		// (succeeded) and bad (failed).
		build func(skipped, good, bad *WorkerWrapper[int, int]) *WorkerWrapper[int, int]
		want  outcome
	}{
		{"must", func(s, _, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true)
		}, notTaken},
		{"must beside a success", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Depend(g, true)
		}, notTaken},
		{"optional beside a must success", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, false).Depend(g, true)
		}, ran},
		{"all optional, one succeeded", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, false).Depend(g, false)
		}, ran},
		{"all optional, none taken", func(s, _, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, false)
		}, notTaken},
		{"all optional, the other failed", func(s, _, b *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, false).Depend(b, false)
		}, outcome{err: errBoom}},
		{"AllSucceeded", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, false).Depend(g, false).Join(AllSucceeded())
		}, notTaken},
		{"AllDone", func(s, _, b *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Depend(b, true).Join(AllDone())
		}, ran},
		{"AnySucceeded, one succeeded", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Depend(g, true).Join(AnySucceeded())
		}, ran},
		{"AnySucceeded, the other failed", func(s, _, b *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Depend(b, true).Join(AnySucceeded())
		}, outcome{err: errBoom}},
		{"AtLeast(2) of three, one not taken", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			g2 := NewWrapper("g2", okWorker(), 0).Depend(g, true)
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Depend(g, true).Depend(g2, true).Join(AtLeast(2))
		}, ran},
		{"AtLeast(2), not enough taken", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Depend(g, true).Join(AtLeast(2))
		}, notTaken},
		{"NamedSucceeded names it", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, false).Depend(g, false).Join(NamedSucceeded("skipped"))
		}, notTaken},
		{"NamedSucceeded names the other", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, false).Depend(g, false).Join(NamedSucceeded("good"))
		}, ran},
		{"When on another upstream", func(s, g, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Depend(g, true).Join(When("good", func(int) bool { return true }))
		}, notTaken},
		{"custom join sees it", func(s, _, _ *WorkerWrapper[int, int]) *WorkerWrapper[int, int] {
			return NewWrapper("x", okWorker(), 0).Depend(s, true).Join(CustomJoin(func(ups []Upstream) Decision {
				if ups[0].Ended && !ups[0].OK && ups[0].Err == ErrNotTaken {
					return DecideRun
				}
				return DecideFail
			}))
		}, ran},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAsync(t)
			var acted atomic.Bool
			root := NewWrapper("root", okWorker(), 0)
			skipped := NewWrapper("skipped", okWorker(), 0).Depend(root, true).Join(When("root", func(int) bool { return false }))
			good := NewWrapper("good", okWorker(), 0).Depend(root, true)
			bad := NewWrapper("bad", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0).Depend(root, true)
			x := tc.build(skipped, good, bad)
			x.worker = WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				acted.Store(true)
				return 7, nil
			})
			require.NoError(t, a.BeginWork(context.Background(), 0, root))
			require.ErrorIs(t, skipped.Result().Err, ErrNotTaken)
			assert.Equal(t, tc.want.ran, acted.Load(), "ran")
			res := x.Result()
			switch {
			case tc.want.err == nil:
				assert.Equal(t, WorkResult[int]{Value: 7, State: ResultSuccess}, res)
			case tc.want.err == ErrNotTaken:
				// exactly the sentinel: a node not taken, not a failure
				// that wraps one
				assert.Equal(t, ErrNotTaken, res.Err)
			default:
				assert.ErrorIs(t, res.Err, tc.want.err)
				assert.NotErrorIs(t, res.Err, ErrNotTaken, "a failure beside a branch not taken is a failure")
			}
		})
	}
}

// TestWhenUpstreamFails checks that a When join fails its node, with
// the upstream's error, when an upstream fails, without calling its
// condition, and that a failure under PolicyContinue gives the
// condition the default value.
func TestWhenUpstreamFails(t *testing.T) {
	t.Run("fail", func(t *testing.T) {
		a := newAsync(t)
		var asked atomic.Bool
		up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(int) bool { asked.Store(true); return true }))
		run, err := a.Start(context.Background(), 0, up)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		var ue *UpstreamError
		require.ErrorAs(t, x.Result().Err, &ue)
		assert.Equal(t, "up", ue.ID)
		assert.ErrorIs(t, x.Result().Err, errBoom)
		assert.False(t, asked.Load())
		assert.Equal(t, `must upstream "up" failed`, nodeReport(t, run.Report(), "x").Reason)
	})
	t.Run("anonymous", func(t *testing.T) {
		// An upstream without an id is named by its index, in the
		// error and in the report's reason, not as "". The default
		// join's node beside it says the same.
		a := newAsync(t)
		up := NewWrapper("", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0)
		b := NewWrapper("b", okWorker(), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(up, true).Depend(b, true).Join(When("b", func(int) bool { return true }))
		y := NewWrapper("y", okWorker(), 0).Depend(up, true)
		run, err := a.Start(context.Background(), 0, up, b)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		for _, n := range []*WorkerWrapper[int, int]{x, y} {
			var ue *UpstreamError
			require.ErrorAs(t, n.Result().Err, &ue)
			assert.Empty(t, ue.ID)
			assert.EqualError(t, ue, "asynctool: upstream #0 failed: boom")
			assert.Equal(t, "must upstream #0 failed", nodeReport(t, run.Report(), n.ID()).Reason)
		}
	})
	t.Run("continue", func(t *testing.T) {
		a := newAsync(t)
		var got atomic.Int64
		up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 5, errBoom }), 0).
			Default(42).OnFailure(PolicyContinue)
		x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(v int) bool { got.Store(int64(v)); return true }))
		require.NoError(t, a.BeginWork(context.Background(), 0, up))
		assert.Equal(t, ResultSuccess, x.Result().State)
		assert.Equal(t, int64(42), got.Load())
	})
}

// TestWhenWaitsForEveryUpstream checks that the condition is asked once,
// after every upstream succeeded, with the named upstream's value.
func TestWhenWaitsForEveryUpstream(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	var calls atomic.Int32
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return gated(gate, 1)(ctx, Wrappers{})
	}), 0)
	fast := route("fast", "go")
	x := NewWrapper("x", okWorker(), 0).Depend(slow, true).Depend(fast, true).Join(When("fast", func(v string) bool {
		calls.Add(1)
		return v == "go"
	}))
	run, err := a.Start(context.Background(), 0, slow, fast)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fast.State() == StateFinish }, 10*time.Second, time.Millisecond)
	assert.Zero(t, calls.Load(), "asked before slow ended")
	assert.Equal(t, StateInit, x.State())
	release()
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, ResultSuccess, x.Result().State)
}

// TestWhenDecidesOnTheUpstreamsOnceAllEnded: two upstream ends can race,
// so the call of a When join that sees every upstream ended may come
// before the call for an upstream that failed or was not taken. That
// upstream still decides, as its own call would have: a failure fails
// the node (before a branch not taken), a branch not taken makes it not
// taken, and the condition is asked only when every upstream succeeded.
func TestWhenDecidesOnTheUpstreamsOnceAllEnded(t *testing.T) {
	ok := func(id string, v any) Upstream {
		return Upstream{ID: id, Ended: true, OK: true, Result: ResultSuccess, Value: v}
	}
	notTaken := Upstream{ID: "skipped", Ended: true, Result: ResultException, Err: ErrNotTaken}
	failed := Upstream{ID: "bad", Ended: true, Result: ResultException, Err: errBoom}
	for _, tc := range []struct {
		name string
		ups  []Upstream
		want Decision
	}{
		{"every upstream succeeded", []Upstream{ok("up", "a"), ok("other", 1)}, DecideRun},
		{"one was not taken", []Upstream{ok("up", "a"), notTaken}, DecideSkip},
		{"one failed", []Upstream{ok("up", "a"), failed}, DecideFail},
		{"one not taken, one failed", []Upstream{notTaken, ok("up", "a"), failed}, DecideFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			j := When("up", func(v string) bool { asked = true; return v == "a" })
			d, err := j.when(ok("up", "a"), tc.ups) // the call for up, which ended last
			assert.Equal(t, tc.want, d)
			assert.Equal(t, tc.want == DecideRun, asked, "the condition asked")
			if tc.want != DecideFail {
				assert.NoError(t, err)
				return
			}
			var up *UpstreamError
			require.ErrorAs(t, err, &up)
			assert.Equal(t, "bad", up.ID)
			assert.ErrorIs(t, err, errBoom)
		})
	}
}

// TestWhenConditionPanics checks that a panic in the condition fails the
// node with a *PanicError and leaves the run going.
func TestWhenConditionPanics(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(int) bool { panic("bad condition") }))
	y := NewWrapper("y", okWorker(), 0).Depend(up, true)
	run, err := a.Start(context.Background(), 0, up)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	var pe *PanicError
	require.ErrorAs(t, x.Result().Err, &pe)
	assert.Equal(t, "bad condition", pe.Value)
	assert.Equal(t, ResultSuccess, y.Result().State)
	assert.Equal(t, `join when "up": its condition panicked`, nodeReport(t, run.Report(), "x").Reason)
}

type shape interface{ Area() float64 }

type square float64

func (s square) Area() float64 { return float64(s * s) }

// TestWhenTypes checks Compile's check of a When join's type against its
// upstream's result type, and the check made at run time when the
// upstream's type is an interface.
func TestWhenTypes(t *testing.T) {
	anyNode := func(v any) *WorkerWrapper[int, any] {
		return NewWrapper("up", WorkerFunc[int, any](func(context.Context, int, Wrappers) (any, error) { return v, nil }), 0)
	}
	t.Run("compile", func(t *testing.T) {
		tests := []struct {
			name  string
			build func() Wrapper
			msg   string // "" when Compile accepts it
		}{
			{"same type", func() Wrapper {
				up := route("up", "a")
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", isRoute("a")))
				return up
			}, ""},
			{"other type", func() Wrapper {
				up := route("up", "a")
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(int) bool { return true }))
				return up
			}, `node "x": When("up") takes int, and "up" returns string`},
			{"named type of the same underlying type", func() Wrapper {
				type label string
				up := route("up", "a")
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(label) bool { return true }))
				return up
			}, `takes asynctool.label, and "up" returns string`},
			{"interface the result implements", func() Wrapper {
				up := NewWrapper("up", WorkerFunc[int, square](func(context.Context, int, Wrappers) (square, error) { return 2, nil }), 0)
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(s shape) bool { return s.Area() > 1 }))
				return up
			}, ""},
			{"interface the result does not implement", func() Wrapper {
				up := route("up", "a")
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(shape) bool { return true }))
				return up
			}, `takes asynctool.shape, and "up" returns string`},
			{"any result", func() Wrapper {
				up := anyNode("a")
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", isRoute("a")))
				return up
			}, ""},
			{"interface result no type of which is T", func() Wrapper {
				up := NewWrapper("up", WorkerFunc[int, shape](func(context.Context, int, Wrappers) (shape, error) { return square(1), nil }), 0)
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", isRoute("a")))
				return up
			}, `takes string, and "up" returns asynctool.shape`},
			{"not an upstream", func() Wrapper {
				up := route("up", "a")
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("other", isRoute("a")))
				return up
			}, `node "x": "other" is not one of its upstreams`},
			{"nil condition", func() Wrapper {
				up := route("up", "a")
				NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When[string]("up", nil))
				return up
			}, `node "x": When("up") with a nil condition`},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := Compile(tc.build())
				if tc.msg == "" {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, ErrBadJoin)
				assert.Contains(t, err.Error(), tc.msg)
				var ge *GraphError
				require.ErrorAs(t, err, &ge)
				assert.Equal(t, "x", ge.Nodes[0])
			})
		}
	})
	t.Run("run", func(t *testing.T) {
		for _, tc := range []struct {
			v    any
			want error // nil: the condition was asked and ran the node
			msg  string
		}{
			{"a", nil, ""},
			{7.0, ErrResultType, "a float64, 7"},
			{nil, ErrResultType, "nil"},
		} {
			t.Run(fmt.Sprint(tc.v), func(t *testing.T) {
				a := newAsync(t)
				up := anyNode(tc.v)
				x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", isRoute("a")))
				require.NoError(t, a.BeginWork(context.Background(), 0, up))
				if tc.want == nil {
					assert.Equal(t, ResultSuccess, x.Result().State)
					return
				}
				assert.ErrorIs(t, x.Result().Err, tc.want)
				assert.Contains(t, x.Result().Err.Error(), `When("up") takes string, and the upstream's value is `+tc.msg)
			})
		}
	})
	t.Run("value that is not the interface taken", func(t *testing.T) {
		// Compile lets an interface result through to a When taking
		// another interface (some type may implement both): a value that
		// does not implement it fails the node, as a value that is not a
		// T does, and the condition is not asked with a nil in its place.
		a := newAsync(t)
		up := anyNode(7.0)
		var asked atomic.Bool
		x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(shape) bool { asked.Store(true); return true }))
		run, err := a.Start(context.Background(), 0, up)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		assert.ErrorIs(t, x.Result().Err, ErrResultType)
		assert.Contains(t, x.Result().Err.Error(), `When("up") takes asynctool.shape, and the upstream's value is a float64, 7`)
		assert.False(t, asked.Load())
		assert.Equal(t, `join when "up": upstream's value has another type`, nodeReport(t, run.Report(), "x").Reason, "its join failed it; no worker ran")
	})
	t.Run("nil interface to an interface", func(t *testing.T) {
		a := newAsync(t)
		up := anyNode(nil)
		var gotNil atomic.Bool
		x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(e error) bool { gotNil.Store(e == nil); return true }))
		require.NoError(t, a.BeginWork(context.Background(), 0, up))
		assert.Equal(t, ResultSuccess, x.Result().State)
		assert.True(t, gotNil.Load())
	})
}

// TestDecideSkip checks a custom join's DecideSkip: the node is not
// taken, and an upstream that only it needed and had not started is
// short-circuited.
func TestDecideSkip(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	first := NewWrapper("first", okWorker(), 0)
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return gated(gate, 1)(ctx, Wrappers{})
	}), 0)
	late := NewWrapper("late", okWorker(), 0).Depend(slow, true) // waits on slow: not started when x decides
	x := NewWrapper("x", okWorker(), 0).Depend(first, true).Depend(late, true).Join(CustomJoin(func(ups []Upstream) Decision {
		if ups[0].Ended {
			return DecideSkip
		}
		return DecideWait
	}))
	run, err := a.Start(context.Background(), 0, first, slow)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return x.State() == StateError }, 10*time.Second, time.Millisecond)
	release()
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, ErrNotTaken, x.Result().Err)
	assert.Equal(t, ErrSkipped, late.Result().Err, "late only fed x")
	assert.Equal(t, "skip", DecideSkip.String())
	assert.Equal(t, `not taken: join custom decided so`, nodeReport(t, run.Report(), "x").Reason)
}

// TestNotTakenHooks checks that OnNodeSkip sees a node not taken, with
// ErrNotTaken, and that a policy does not apply to it: a node not taken
// has not failed.
func TestNotTakenHooks(t *testing.T) {
	var mu sync.Mutex
	skips := map[string]error{}
	a := newAsync(t, WithHooks(&Hooks{OnNodeSkip: func(_ context.Context, ev NodeEvent) {
		mu.Lock()
		skips[ev.ID] = ev.Err
		mu.Unlock()
	}}))
	up := NewWrapper("up", okWorker(), 0)
	x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(int) bool { return false })).OnFailure(PolicyEnd)
	y := NewWrapper("y", okWorker(), 0).Depend(x, true).OnFailure(PolicySuspend)
	z := NewWrapper("z", okWorker(), 0).Depend(up, true)
	require.NoError(t, a.BeginWork(context.Background(), 0, up), "PolicyEnd applies to a failure, not to a branch not taken")
	assert.Equal(t, ResultSuccess, z.Result().State)
	assert.Equal(t, ErrNotTaken, y.Result().Err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]error{"x": ErrNotTaken, "y": ErrNotTaken}, skips)
}

// TestWhenInAPlanConcurrently runs one plan with a switch from many
// goroutines, each run choosing its branch from its own parameter, under
// -race.
func TestWhenInAPlanConcurrently(t *testing.T) {
	a := newAsync(t)
	r := NewWrapper("route", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return ctx.Value(ctxKey{}).(int), nil
	}), 0)
	even := NewWrapper("even", okWorker(), 0).Depend(r, true).Join(When("route", func(v int) bool { return v%2 == 0 }))
	odd := NewWrapper("odd", okWorker(), 0).Depend(r, true).Join(When("route", func(v int) bool { return v%2 == 1 }))
	join := NewWrapper("join", okWorker(), 0).Depend(even, false).Depend(odd, false)
	pl, err := Compile(r)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for k := range 200 {
		wg.Go(func() {
			run, err := a.RunPlan(context.WithValue(context.Background(), ctxKey{}, k), pl, 0)
			if !assert.NoError(t, err) {
				return
			}
			defer run.Release()
			taken, other := even, odd
			if k%2 == 1 {
				taken, other = odd, even
			}
			assert.Equal(t, ResultSuccess, taken.ResultIn(run).State, "run %d", k)
			assert.Equal(t, ErrNotTaken, other.ResultIn(run).Err, "run %d", k)
			assert.Equal(t, ResultSuccess, join.ResultIn(run).State, "run %d", k)
		})
	}
	wg.Wait()
}

// TestDecisionOutOfRangeNamesFive checks the message for a Decision past
// DecideSkip, or below DecideWait: either fails the node at once, also
// before its last upstream ended.
func TestDecisionOutOfRangeNamesFive(t *testing.T) {
	for _, d := range []Decision{DecideSkip + 1, DecideWait - 1} {
		t.Run(d.String(), func(t *testing.T) {
			a := newAsync(t)
			up := NewWrapper("up", okWorker(), 0)
			gate := make(chan struct{})
			release := releaser(t, gate)
			slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				return gated(gate, 1)(ctx, Wrappers{})
			}), 0)
			x := NewWrapper("x", okWorker(), 0).Depend(up, true).Depend(slow, true).
				Join(CustomJoin(func([]Upstream) Decision { return d }))
			run, err := a.Start(context.Background(), 0, up, slow)
			require.NoError(t, err)
			t.Cleanup(run.Cancel) // before Close, should x be left waiting
			require.Eventually(t, func() bool { return x.State() == StateError }, 10*time.Second, time.Millisecond, "x failed before slow ended")
			release()
			require.NoError(t, run.Wait(context.Background()))
			require.Error(t, x.Result().Err)
			assert.Contains(t, x.Result().Err.Error(), fmt.Sprintf("%v, which is none of the five", d))
			assert.False(t, errors.Is(x.Result().Err, ErrNotTaken))
		})
	}
}

// TestReturnedSentinelIsAFailure checks that a worker returning
// ErrNotTaken or ErrSkipped itself (an upstream's error, passed on), or a
// Resume(FailWith(...)) of either, fails the node: it ran, it is reported
// as failed, its dependants fail rather than being not taken, and
// errors.Is still finds the sentinel.
func TestReturnedSentinelIsAFailure(t *testing.T) {
	for _, sentinel := range []error{ErrNotTaken, ErrSkipped} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			var skips atomic.Int32
			a := newAsync(t, WithHooks(&Hooks{OnNodeSkip: func(context.Context, NodeEvent) { skips.Add(1) }}))
			up := NewWrapper("up", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, sentinel }), 0)
			down := NewWrapper("down", okWorker(), 0).Depend(up, true)
			NewWrapper("opt", okWorker(), 0).Depend(up, false)
			run, err := a.Start(context.Background(), 0, up)
			require.NoError(t, err)
			require.NoError(t, run.Wait(context.Background()))
			rep := run.Report()
			u := nodeReport(t, rep, "up")
			assert.Equal(t, StatusFailed, u.Status)
			assert.True(t, u.Ran)
			assert.Equal(t, "worker failed", u.Reason)
			assert.ErrorIs(t, up.Result().Err, sentinel)
			assert.NotEqual(t, sentinel, up.Result().Err)
			assert.Equal(t, sentinel.Error(), up.Result().Err.Error())
			var ue *UpstreamError
			assert.ErrorAs(t, down.Result().Err, &ue, "down fails, it is not taken")
			assert.Equal(t, StatusFailed, nodeReport(t, rep, "down").Status)
			assert.Equal(t, StatusFailed, nodeReport(t, rep, "opt").Status)
			assert.Zero(t, skips.Load())
		})
	}
	t.Run("FailWith", func(t *testing.T) {
		a := newAsync(t)
		up := NewWrapper("up", okWorker(), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(CustomJoin(func([]Upstream) Decision { return DecideSuspend }))
		down := NewWrapper("down", okWorker(), 0).Depend(x, true)
		run, err := a.Start(context.Background(), 0, up)
		require.NoError(t, err)
		t.Cleanup(run.Cancel)
		require.Eventually(t, func() bool { return nodeReport(t, run.Report(), "x").Status == StatusPending }, 10*time.Second, time.Millisecond)
		require.NoError(t, run.Resume("x", FailWith(ErrNotTaken)))
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, StatusFailed, nodeReport(t, run.Report(), "x").Status)
		assert.ErrorIs(t, x.Result().Err, ErrNotTaken)
		var ue *UpstreamError
		assert.ErrorAs(t, down.Result().Err, &ue)
	})
}

// TestWhenResultFallback checks a fallback: the backup runs only when the
// primary did not succeed, whatever the reason (an error, its own
// timeout, not taken), its condition sees the primary's whole result,
// and the page runs on whichever succeeded.
func TestWhenResultFallback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		primary func(context.Context, int, Wrappers) (int, error)
		taken   bool // primary's branch taken
		backup  bool // backup ran
		state   ResultState
		// timeout is the primary's own: short only where it is to time
		// out, since a worker that returns at once may still take over a
		// millisecond on a loaded machine (under -race 3 runs in 1,000
		// of the others timed out with a millisecond for every case).
		timeout time.Duration
	}{
		{"primary succeeds", func(context.Context, int, Wrappers) (int, error) { return 1, nil }, true, false, ResultSuccess, time.Hour},
		{"primary fails", func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }, true, true, ResultException, time.Hour},
		{"primary times out", func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}, true, true, ResultTimeout, time.Millisecond},
		{"primary not taken", func(context.Context, int, Wrappers) (int, error) { return 1, nil }, false, true, ResultException, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAsync(t)
			var seen atomic.Pointer[WorkResult[int]]
			var ran atomic.Bool
			flag := NewWrapper("flag", WorkerFunc[int, bool](func(context.Context, int, Wrappers) (bool, error) { return tc.taken, nil }), 0)
			primary := NewWrapper("primary", WorkerFunc[int, int](tc.primary), 0).Default(-1).Timeout(tc.timeout).
				Depend(flag, true).Join(When("flag", func(on bool) bool { return on }))
			backup := NewWrapper("backup", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				ran.Store(true)
				return 2, nil
			}), 0).Depend(primary, false).Join(WhenResult("primary", func(r WorkResult[int]) bool {
				seen.Store(&r)
				return r.State != ResultSuccess
			}))
			page := NewWrapper("page", WorkerFunc[int, int](func(_ context.Context, _ int, all Wrappers) (int, error) {
				for _, w := range []*WorkerWrapper[int, int]{primary, backup} {
					if r, _ := w.ResultFrom(all); r.State == ResultSuccess {
						return r.Value * 10, nil
					}
				}
				return 0, errors.New("neither")
			}), 0).Depend(primary, false).Depend(backup, false)
			require.NoError(t, a.BeginWork(context.Background(), 0, flag))
			assert.Equal(t, tc.backup, ran.Load(), "backup ran")
			want := 10
			if tc.backup {
				want = 20
			}
			assert.Equal(t, WorkResult[int]{Value: want, State: ResultSuccess}, page.Result())
			if !tc.backup {
				// The page ran on the primary's success and no longer
				// needed the backup: short-circuited, or not taken if its
				// join was asked first.
				assert.Contains(t, []error{ErrSkipped, ErrNotTaken}, backup.Result().Err)
				return
			}
			r := seen.Load()
			require.NotNil(t, r)
			assert.Equal(t, tc.state, r.State)
			assert.Equal(t, -1, r.Value, "the primary's default value")
			assert.Equal(t, primary.Result().Err, r.Err)
		})
	}
}

// TestWhenResultWaitsForEveryUpstream checks that WhenResult, like
// AllDone, waits for every upstream and is not failed by one that failed.
func TestWhenResultWaitsForEveryUpstream(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	bad := NewWrapper("bad", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0)
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return gated(gate, 1)(ctx, Wrappers{})
	}), 0)
	var calls atomic.Int32
	x := NewWrapper("x", okWorker(), 0).Depend(bad, true).Depend(slow, true).Join(WhenResult("bad", func(r WorkResult[int]) bool {
		calls.Add(1)
		return errors.Is(r.Err, errBoom)
	}))
	run, err := a.Start(context.Background(), 0, bad, slow)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return bad.State() == StateError }, 10*time.Second, time.Millisecond)
	assert.Zero(t, calls.Load())
	assert.Equal(t, StateInit, x.State())
	release()
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, ResultSuccess, x.Result().State)
	assert.Equal(t, `when result of "bad"`, Join(WhenResult("bad", func(WorkResult[int]) bool { return true })).String())
}

// TestWhenResultValidation checks Compile's checks of a WhenResult join.
func TestWhenResultValidation(t *testing.T) {
	for _, tc := range []struct {
		join Join
		msg  string
	}{
		{WhenResult[string]("up", nil), `node "x": WhenResult("up") with a nil condition`},
		{WhenResult("up", func(WorkResult[int]) bool { return true }), `node "x": WhenResult("up") takes int, and "up" returns string`},
		{WhenResult("nope", func(WorkResult[string]) bool { return true }), `node "x": "nope" is not one of its upstreams`},
	} {
		up := route("up", "a")
		NewWrapper("x", okWorker(), 0).Depend(up, true).Join(tc.join)
		_, err := Compile(up)
		require.ErrorIs(t, err, ErrBadJoin)
		assert.Contains(t, err.Error(), tc.msg)
	}
}

// TestCauseThatIsTheSentinelIsATimeout checks that a run cancelled with
// ErrNotTaken as its cause ends its nodes as timeouts, not as branches
// not taken: the nodes after them are ended by the run too, and none is
// reported skipped.
func TestCauseThatIsTheSentinelIsATimeout(t *testing.T) {
	a := newAsync(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	up := NewWrapper("up", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		cancel(ErrNotTaken)
		<-ctx.Done()
		return 0, ctx.Err()
	}), 0)
	down := NewWrapper("down", okWorker(), 0).Depend(up, true)
	run, err := a.Start(ctx, 0, up)
	require.NoError(t, err)
	require.ErrorIs(t, run.Wait(context.Background()), ErrNotTaken)
	for _, n := range run.Report().Nodes {
		assert.Equal(t, StatusTimedOut, n.Status, n.ID)
	}
	assert.Equal(t, ResultTimeout, down.Result().State)
	assert.False(t, run.isNotTaken(0) || run.isNotTaken(1))
}

// TestReportShowsJoins checks that reports, static and of a run, name a
// node's join when it is not the default one, and that DOT and Mermaid
// show it under the node's id, escaped.
func TestReportShowsJoins(t *testing.T) {
	build := func() (*WorkerWrapper[int, string], *WorkerWrapper[int, int]) {
		r := route("route", "db")
		cache := NewWrapper("cache", okWorker(), 0).Depend(r, true).Join(When("route", isRoute("cache")))
		NewWrapper("db", okWorker(), 0).Depend(r, true).Join(When("route", isRoute("db")))
		NewWrapper("plain", okWorker(), 0).Depend(r, true).Timeout(time.Minute) // flow rules, default join
		return r, cache
	}
	r, _ := build()
	static, err := Describe(r)
	require.NoError(t, err)
	a := newAsync(t)
	r2, _ := build()
	run, err := a.Start(context.Background(), 0, r2)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	for name, rep := range map[string]*Report{"static": static, "run": run.Report()} {
		assert.Equal(t, "", nodeReport(t, rep, "route").Join, name)
		assert.Equal(t, `when "route"`, nodeReport(t, rep, "cache").Join, name)
		assert.Equal(t, "", nodeReport(t, rep, "plain").Join, name)
		assert.Contains(t, rep.DOT(), `cache\nwhen \"route\"`, name)
		assert.Contains(t, rep.Mermaid(), `cache<br/>when #quot;route#quot;`, name)
	}
	assert.Contains(t, run.Report().DOT(), `cache\nwhen \"route\"\nnot taken`)
}

// TestWideWhenJoinAllocatesLinearly checks that a When join over many
// upstreams looks at each upstream's end alone until the last one, instead of at
// every upstream on every end, which made a wide join quadratic: a run
// of a plan whose sink has a When join over a thousand upstreams
// allocates a bounded number of objects per upstream (one []Upstream per
// end, over 1,000 objects per run, before the fix; a few dozen after).
func TestWideWhenJoinAllocatesLinearly(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a := newAsync(t, WithMaxWorkers(2))
	const n = 1000
	root := NewWrapper("root", okWorker(), 0)
	var asked atomic.Int32
	sink := NewWrapper("sink", okWorker(), 0).Join(When("m0", func(int) bool { asked.Add(1); return true }))
	for k := range n - 2 {
		sink.Depend(NewWrapper(fmt.Sprint("m", k), okWorker(), 0).Depend(root, true), true)
	}
	pl, err := Compile(root)
	require.NoError(t, err)
	runs := int32(0)
	run := func() {
		runs++
		r, err := a.RunPlan(context.Background(), pl, time.Minute)
		if err != nil {
			panic(err)
		}
		if sink.ResultIn(r).State != ResultSuccess {
			panic("the sink did not run")
		}
		r.Release()
	}
	for range 20 {
		run() // warm the pools
	}
	allocs := testing.AllocsPerRun(50, run)
	t.Logf("%.1f allocs per run of %d nodes", allocs, n)
	assert.Less(t, allocs, float64(n)/4, "allocs per run")
	assert.Equal(t, runs, asked.Load(), "the condition is asked once per run")
}

// TestWhenContinuedAnyUpstreamWithoutDefault checks that a When join on
// an any upstream that failed under PolicyContinue with no default asks
// its condition with T's zero value, as WhenResult does, instead of
// failing with ErrResultType: the doc says the condition gets the
// default value, and a nil interface is the zero value of any.
func TestWhenContinuedAnyUpstreamWithoutDefault(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", WorkerFunc[int, any](func(context.Context, int, Wrappers) (any, error) { return nil, errBoom }), 0).
		OnFailure(PolicyContinue)
	got := atomic.Int64{}
	got.Store(-1)
	x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(v int) bool { got.Store(int64(v)); return true }))
	require.NoError(t, a.BeginWork(context.Background(), 0, up))
	assert.Equal(t, ResultSuccess, x.Result().State, "%v", x.Result().Err)
	assert.Equal(t, int64(0), got.Load())
}

// TestWhenFailsAtOnceInAnyOrder: When is documented as AllSucceeded
// with a condition, and AllSucceeded fails at the first failure, in any
// declaration order. A When join on [slow, bad] waited for slow, listed
// first, before looking at bad's failure: the node did not fail until
// slow ended, and a pending (PolicySuspend) slow stalled the run.
func TestWhenFailsAtOnceInAnyOrder(t *testing.T) {
	for _, slowFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "slow first", false: "slow last"}[slowFirst], func(t *testing.T) {
			a := newAsync(t)
			gate := make(chan struct{})
			release := releaser(t, gate)
			slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				return gated(gate, 1)(ctx, Wrappers{})
			}), 0)
			bad := NewWrapper("bad", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errBoom }), 0)
			x := NewWrapper("x", okWorker(), 0)
			if slowFirst {
				x.Depend(slow, true).Depend(bad, true)
			} else {
				x.Depend(bad, true).Depend(slow, true)
			}
			x.Join(When("slow", func(int) bool { return true }))
			run, err := a.Start(context.Background(), 0, slow, bad)
			require.NoError(t, err)
			assert.Eventually(t, func() bool { return x.State() == StateError }, 5*time.Second, time.Millisecond,
				"x waited for slow although bad had failed")
			release()
			require.NoError(t, run.Wait(context.Background()))
			var ue *UpstreamError
			require.ErrorAs(t, x.Result().Err, &ue)
			assert.Equal(t, "bad", ue.ID)
		})
	}
}

// TestWhenNotTakenAtOnceInAnyOrder: the same for an upstream not
// taken, which makes the node not taken at once.
func TestWhenNotTakenAtOnceInAnyOrder(t *testing.T) {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	slow := NewWrapper("slow", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		return gated(gate, 1)(ctx, Wrappers{})
	}), 0)
	root := NewWrapper("root", okWorker(), 0)
	no := NewWrapper("no", okWorker(), 0).Depend(root, true).Join(When("root", func(int) bool { return false }))
	x := NewWrapper("x", okWorker(), 0).Depend(slow, true).Depend(no, true).Join(When("slow", func(int) bool { return true }))
	run, err := a.Start(context.Background(), 0, slow, root)
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return x.State() == StateError }, 5*time.Second, time.Millisecond,
		"x waited for slow although no was not taken")
	release()
	require.NoError(t, run.Wait(context.Background()))
	assert.Equal(t, ErrNotTaken, x.Result().Err)
}

// TestWhenFailsBesidePendingUpstream: an upstream suspended under
// PolicySuspend, listed first, and another that fails: the When node
// fails at once, as AllSucceeded's does, instead of becoming pending
// with the run stalled on it.
//
// bad fails only once susp's worker has been called: had bad failed
// first, x's failure would have skipped susp, a start node not started
// yet that no successor needed any more (see ShortCircuit), and the run
// would never have stalled.
func TestWhenFailsBesidePendingUpstream(t *testing.T) {
	for _, join := range []Join{AllSucceeded(), When("susp", func(int) bool { return true })} {
		t.Run(join.String(), func(t *testing.T) {
			a := newAsync(t)
			suspCalled := make(chan struct{})
			susp := NewWrapper("susp", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
				close(suspCalled) // called once: SucceedWith does not rerun it
				return 0, errBoom
			}), 0).OnFailure(PolicySuspend)
			bad := NewWrapper("bad", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
				select {
				case <-suspCalled: // susp started: it is no longer skipped
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				time.Sleep(10 * time.Millisecond) // after susp is pending
				return 0, errBoom
			}), 0)
			x := NewWrapper("x", okWorker(), 0).Depend(susp, true).Depend(bad, true).Join(join)
			run, err := a.Start(context.Background(), time.Minute, susp, bad)
			require.NoError(t, err)
			select {
			case <-run.Suspended():
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not stall on susp")
			}
			assert.Equal(t, StateError, x.State(), "x waits on pending susp although bad failed")
			require.NoError(t, run.Resume("susp", SucceedWith(1)))
			require.NoError(t, run.Wait(context.Background()))
			assert.ErrorIs(t, x.Result().Err, errBoom)
		})
	}
}

// TestWhenConditionGoexit: a condition that ends its goroutine with
// runtime.Goexit fails the node with ErrGoexit, as a CustomJoin's fn
// does, the run goes on, and the report does not blame the worker, which
// never ran.
func TestWhenConditionGoexit(t *testing.T) {
	a := newAsync(t)
	up := NewWrapper("up", okWorker(), 0)
	x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(When("up", func(int) bool { runtime.Goexit(); return true }))
	other := NewWrapper("other", okWorker(), 0).Depend(up, true)
	after := NewWrapper("after", okWorker(), 0).Depend(x, false)
	run, err := a.Start(context.Background(), time.Minute, up)
	require.NoError(t, err)
	requireEnds(t, run, "the run did not end after the condition's Goexit")
	require.NoError(t, run.Wait(context.Background()))
	assert.ErrorIs(t, x.Result().Err, ErrGoexit)
	assert.Equal(t, ResultSuccess, other.Result().State)
	assert.ErrorIs(t, after.Result().Err, ErrGoexit)
	n := nodeReport(t, run.Report(), "x")
	assert.False(t, n.Ran)
	assert.Equal(t, StatusFailed, n.Status)
	assert.NotContains(t, n.Reason, "worker", "the worker never ran")
	assert.Contains(t, n.Reason, `when "up"`)
}

// TestFallbackConditionOfTheDocs: the fallback condition that
// WhenResult's doc and the README give calls the backup when the primary
// failed, and not when the primary was a branch not taken (with
// r.State != ResultSuccess, an empty cart was priced by the backup). A
// primary that ran and failed with an error wrapping ErrNotTaken (a
// composite worker passing on its sub-run's branch not taken) failed:
// the condition the docs gave, with errors.Is, left it without a backup.
func TestFallbackConditionOfTheDocs(t *testing.T) {
	fallback := func(r WorkResult[int]) bool { return r.Err != nil && r.Err != ErrNotTaken }
	for _, tc := range []struct {
		name       string
		items      int
		primaryErr error
		want       ResultState
	}{
		{"primary failed", 2, errors.New("down"), ResultSuccess},
		{"primary succeeded", 2, nil, ResultException},
		{"primary not taken", 0, nil, ResultException},
		{"primary failed with a sub-run's branch not taken", 2, fmt.Errorf("sub-plan: %w", ErrNotTaken), ResultSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			defer a.Close()
			cart := NewWrapper("cart", WorkerFunc[int, int](func(_ context.Context, n int, _ Wrappers) (int, error) { return n, nil }), tc.items)
			primary := NewWrapper("primary", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 10, tc.primaryErr }), 0).
				Depend(cart, true).Join(When("cart", func(n int) bool { return n > 0 }))
			backup := NewWrapper("backup", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 11, nil }), 0).
				Depend(primary, false).Join(WhenResult("primary", fallback))
			require.NoError(t, a.BeginWork(context.Background(), time.Second, cart))
			assert.Equal(t, tc.want, backup.Result().State, "%v", backup.Result().Err)
			if tc.want != ResultSuccess {
				assert.ErrorIs(t, backup.Result().Err, ErrNotTaken)
			}
		})
	}
}

// TestWhenResultOnAnInterfaceUpstreamThatFailed: a fallback whose
// primary's result type is an interface (an any, as a generic adapter
// or a durable node may have) and that fails without a default value
// ends with a nil value. WhenResult[int]'s condition must be asked with
// the zero int and the error, so that the backup runs; the node failed
// with ErrResultType instead, in exactly the case a fallback is for.
func TestWhenResultOnAnInterfaceUpstreamThatFailed(t *testing.T) {
	a := newAsync(t)
	primary := NewWrapper("primary", WorkerFunc[int, any](func(context.Context, int, Wrappers) (any, error) { return nil, errBoom }), 0)
	var seen atomic.Pointer[WorkResult[int]]
	backup := NewWrapper("backup", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 2, nil }), 0).
		Depend(primary, false).
		Join(WhenResult("primary", func(r WorkResult[int]) bool {
			seen.Store(&r)
			return r.State != ResultSuccess
		}))
	require.NoError(t, a.BeginWork(context.Background(), 0, primary))
	assert.Equal(t, WorkResult[int]{Value: 2, State: ResultSuccess}, backup.Result())
	r := seen.Load()
	require.NotNil(t, r, "the condition was asked")
	assert.Equal(t, WorkResult[int]{State: ResultException, Err: errBoom}, *r)

	// A success whose value is not a T still fails the node.
	a2 := newAsync(t)
	up := NewWrapper("up", WorkerFunc[int, any](func(context.Context, int, Wrappers) (any, error) { return nil, nil }), 0)
	x := NewWrapper("x", okWorker(), 0).Depend(up, true).Join(WhenResult("up", func(WorkResult[int]) bool { return true }))
	require.NoError(t, a2.BeginWork(context.Background(), 0, up))
	assert.ErrorIs(t, x.Result().Err, ErrResultType)
}

// TestWhenResultNotTakenReason: a WhenResult join looks at one
// upstream's result and does not propagate another's not being taken
// (it runs whatever its upstreams did, as AllDone). When its condition
// said no and the last upstream to end was a branch not taken, the
// report said "upstream "other" was not taken", which is not why the node
// was not taken: its condition on "primary" decided.
//
// The test runs in a synctest bubble so that primary's end has reached
// x's join before flag is released: primary's state is published before
// its successors' joins count its end, so a test that released flag once
// primary.State() said finish saw x decided by primary now and then (2 of
// 300 runs under -race, and in a `make test`).
func TestWhenResultNotTakenReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		gate := make(chan struct{})
		flag := NewWrapper("flag", WorkerFunc[int, bool](func(context.Context, int, Wrappers) (bool, error) {
			<-gate
			return false, nil
		}), 0)
		other := NewWrapper("other", okWorker(), 0).Depend(flag, true).Join(When("flag", func(on bool) bool { return on }))
		primary := NewWrapper("primary", okWorker(), 0)
		x := NewWrapper("x", okWorker(), 0).Depend(primary, true).Depend(other, true).
			Join(WhenResult("primary", func(r WorkResult[int]) bool { return r.State != ResultSuccess }))
		run, err := a.Start(context.Background(), 0, flag, primary)
		require.NoError(t, err)
		synctest.Wait() // every goroutine but flag's worker is idle: primary's end is processed
		require.Equal(t, StateFinish, primary.State())
		close(gate)
		require.NoError(t, run.Wait(context.Background()))
		require.Equal(t, ErrNotTaken, x.Result().Err)
		n := nodeReport(t, run.Report(), "x")
		assert.Equal(t, "other", n.DecidedBy)
		assert.Equal(t, `not taken: join when result of "primary" decided so`, n.Reason)
	})
}
