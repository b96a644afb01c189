package asynctool

import (
	"context"
	"errors"
	"testing"
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
		{"single optional fails (asyncTool would run c)", []dep{{"a", false, false}}, false, errBoom},
		{"must succeeds, optional fails first", []dep{{"b", false, false}, {"a", true, true}}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := &manualExec{}
			a := newAsync(t, WithExecutor(ex))
			rec := newRecorder()
			c := rec.node("c", ok(7))
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
			assert.Equal(t, 1, rec.count(rec.results, "c"), "c's callback fired once")
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
