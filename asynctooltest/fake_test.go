package asynctooltest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errDown = errors.New("down")

func TestFakes(t *testing.T) {
	tests := []struct {
		name  string
		fake  *asynctooltest.Fake[int, string]
		check func(t *testing.T, rep *asynctool.Report, r asynctool.WorkResult[string])
	}{
		{"returns", asynctooltest.Returns[int]("v"), func(t *testing.T, rep *asynctool.Report, r asynctool.WorkResult[string]) {
			asynctooltest.Succeeded(t, rep, "n")
			assert.Equal(t, "v", r.Value)
		}},
		{"fails", asynctooltest.Fails[int, string](errDown), func(t *testing.T, rep *asynctool.Report, r asynctool.WorkResult[string]) {
			asynctooltest.Failed(t, rep, "n", errDown)
			assert.Equal(t, "", r.Value)
		}},
		{"panics", asynctooltest.Panics[int, string]("oops"), func(t *testing.T, rep *asynctool.Report, r asynctool.WorkResult[string]) {
			var pe *asynctool.PanicError
			require.ErrorAs(t, r.Err, &pe)
			assert.Equal(t, "oops", pe.Value)
			asynctooltest.Failed(t, rep, "n", nil)
		}},
		{"func", asynctooltest.Func(func(_ context.Context, p int) (string, error) { return "p", nil }), func(t *testing.T, rep *asynctool.Report, r asynctool.WorkResult[string]) {
			assert.Equal(t, "p", r.Value)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := asynctool.NewWrapper("n", tt.fake, 7)
			rep := asynctooltest.Run(t, w)
			asynctooltest.RanOnce(t, rep, "n")
			assert.Equal(t, 1, tt.fake.Calls())
			assert.Equal(t, []int{7}, tt.fake.Params())
			tt.fake.Params()[0] = 8
			assert.Equal(t, []int{7}, tt.fake.Params(), "Params returns a copy")
			select {
			case <-tt.fake.Started():
			default:
				t.Error("Started not closed after a call")
			}
			tt.check(t, rep, w.Result())
		})
	}
}

// TestSleepsIsVirtual checks that Sleeps takes exactly its duration of
// fake time, and that the deadline interrupts it.
func TestSleepsIsVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := asynctool.NewWrapper("fast", asynctooltest.Sleeps[int](10*time.Millisecond, 1), 0)
		then := asynctool.NewWrapper("then", asynctooltest.Sleeps[int](20*time.Millisecond, 2), 0).Depend(fast, true)
		slow := asynctool.NewWrapper("slow", asynctooltest.Sleeps[int](time.Hour, 3), 0)
		start := time.Now()
		rep := asynctooltest.RunWithin(t, 50*time.Millisecond, fast, slow)
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "the run lasted until the deadline")
		asynctooltest.RanBefore(t, rep, "fast", "then")
		asynctooltest.TimedOut(t, rep, "slow")
		for _, n := range rep.Nodes {
			switch n.ID {
			case "fast":
				assert.Equal(t, 10*time.Millisecond, n.Duration())
			case "then":
				assert.Equal(t, 20*time.Millisecond, n.Duration())
			}
		}
		assert.Equal(t, 2, then.Result().Value)
	})
}

// TestBlocks holds a node in StateWorking until the test releases it.
func TestBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := asynctooltest.Blocks[int]("done")
		w := asynctool.NewWrapper("gate", gate, 0)
		r := asynctooltest.Start(t, 0, w)
		<-gate.Started()
		assert.Equal(t, asynctool.StateWorking, w.State())
		synctest.Wait()
		select {
		case <-r.Done():
			t.Fatal("the run ended before the gate was released")
		default:
		}
		gate.Release()
		gate.Release() // idempotent
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, "done", w.Result().Value)
		asynctooltest.Succeeded(t, r.Report(), "gate")
	})
}

// TestBlocksHonoursDeadline checks that a blocked fake returns when the
// run's deadline passes, so Close does not wait for ever.
func TestBlocksHonoursDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := asynctooltest.Blocks[int]("never")
		rep := asynctooltest.RunWithin(t, time.Second, asynctool.NewWrapper("gate", gate, 0))
		asynctooltest.TimedOut(t, rep, "gate")
		assert.ErrorIs(t, rep.RunErr, context.DeadlineExceeded)
	})
}

// TestWaitingFakesReturnTheContextsCause checks that a fake built by
// Sleeps or Blocks returns the cause of its context when it ends, as
// their doc says, not context.Canceled: a worker called directly in a
// test, with a context cancelled with a cause, sees what the run did.
func TestWaitingFakesReturnTheContextsCause(t *testing.T) {
	stop := errors.New("operator stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	for name, fake := range map[string]*asynctooltest.Fake[int, int]{
		"Sleeps": asynctooltest.Sleeps[int](time.Hour, 1),
		"Blocks": asynctooltest.Blocks[int](1),
	} {
		v, err := fake.Action(ctx, 0, asynctool.Wrappers{})
		assert.ErrorIs(t, err, stop, name)
		assert.Zero(t, v, name)
	}
}

// TestFakeNotMadeByAConstructor: a Fake written as a composite literal
// (&Fake{}) or a nil *Fake, and a Func(nil), failed their node with a
// panic that named nothing of the fake ("close of nil channel", a nil
// dereference), and Release on a zero Fake panicked, as did Calls,
// Params and Started on a nil one. Their node now fails with an error
// that says how to make one, Release does nothing, and the accessors
// say the fake never ran.
func TestFakeNotMadeByAConstructor(t *testing.T) {
	var nilFake *asynctooltest.Fake[int, int]
	for name, tc := range map[string]struct {
		fake *asynctooltest.Fake[int, int]
		want string
	}{
		"zero":      {&asynctooltest.Fake[int, int]{}, "asynctooltest: a Fake must be made with Returns, Fails, Panics, Sleeps, Blocks or Func"},
		"nil":       {nilFake, "asynctooltest: a Fake must be made with Returns, Fails, Panics, Sleeps, Blocks or Func"},
		"Func(nil)": {asynctooltest.Func[int, int](nil), "asynctooltest: Func(nil): the fake has no function to call"},
	} {
		t.Run(name, func(t *testing.T) {
			assert.NotPanics(t, tc.fake.Release)
			w := asynctool.NewWrapper("n", tc.fake, 0)
			rep := asynctooltest.Run(t, w)
			asynctooltest.Failed(t, rep, "n", nil)
			var pe *asynctool.PanicError
			assert.False(t, errors.As(w.Result().Err, &pe), "not a panic: %v", w.Result().Err)
			assert.EqualError(t, w.Result().Err, tc.want)
			if tc.fake != nil && tc.fake.Started() != nil {
				return // Func(nil) is made by a constructor: it counts its calls
			}
			// Its accessors do not panic either, and say it never ran.
			assert.NotPanics(t, func() {
				assert.Zero(t, tc.fake.Calls())
				assert.Empty(t, tc.fake.Params())
				assert.Nil(t, tc.fake.Started(), "a nil channel, which never closes")
			})
		})
	}
}

// A fake implements no Defaulter, as Fake's doc and the README say: a
// failing fake in place of a worker whose DefaultValue gave a fallback
// leaves its node the zero value, and the fallback the handler relies on
// holds only when it is set with Default on the node.
func TestFakeDropsTheWorkersDefaulter(t *testing.T) {
	var fake asynctool.Worker[int, string] = asynctooltest.Fails[int, string](errors.New("down"))
	_, isDefaulter := fake.(asynctool.Defaulter[string])
	assert.False(t, isDefaulter)
	for _, onNode := range []bool{false, true} {
		recs := asynctool.NewWrapper("recs", fake, 0)
		want := ""
		if onNode {
			recs.Default("bestsellers")
			want = "bestsellers"
		}
		rep := asynctooltest.Run(t, recs)
		asynctooltest.Failed(t, rep, "recs", nil)
		assert.Equal(t, want, recs.Result().Value, "Default on the node: %v", onNode)
	}
}
