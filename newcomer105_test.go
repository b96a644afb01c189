package asynctool

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestZeroSerialRefusesTasks uses a Serial declared as a variable (a
// struct field, say) instead of made with NewSerial. Submit and Shutdown
// panicked on its nil executor, and SubmitAfter accepted the task and
// crashed the process when its timer fired, on the timer's goroutine,
// where no recover could reach. The package's rule is that bad input
// gets an error, as the zero Async's BeginWork does.
func TestZeroSerialRefusesTasks(t *testing.T) {
	var s Serial
	ran := false
	assert.ErrorContains(t, s.Submit(func() { ran = true }), "NewSerial")
	cancel, err := s.SubmitAfter(time.Millisecond, func() { ran = true })
	assert.ErrorContains(t, err, "NewSerial")
	assert.Nil(t, cancel)
	_, err = s.SubmitAfter(0, func() { ran = true })
	assert.ErrorContains(t, err, "NewSerial")
	assert.ErrorContains(t, s.Shutdown(context.Background()), "NewSerial")
	time.Sleep(5 * time.Millisecond) // a timer, had one been set, has fired
	s.Close()
	assert.False(t, ran)
	assert.Equal(t, SerialStats{}, s.Stats())
}

// TestZeroKeyedRefusesTasks: a zero Keyed's Submit panicked on its nil
// map, with its shard's lock held.
func TestZeroKeyedRefusesTasks(t *testing.T) {
	var k Keyed[string]
	assert.ErrorContains(t, k.Submit("u1", func() {}), "NewKeyed")
	assert.ErrorContains(t, k.Submit("u1", func() {}), "NewKeyed", "and again: no lock was left held")
	assert.NoError(t, k.Shutdown(context.Background()))
	k.Close()
}

// TestZeroStreamFailsItsNodes: a zero Stream's Run panicked (close of a
// nil channel), and its Close waited for ever for a Run that could never
// end. Its nodes now end at once with the error, and Run and Close
// return it.
func TestZeroStreamFailsItsNodes(t *testing.T) {
	var s Stream[int]
	n := s.Append(func(_ context.Context, prev int) (int, error) { return prev + 1, nil })
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the node of a zero Stream waits for ever")
	}
	_, err := n.Wait()
	assert.ErrorContains(t, err, "NewStream")
	assert.ErrorContains(t, s.Run(context.Background()), "NewStream")
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		assert.ErrorContains(t, err, "NewStream")
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a zero Stream waits for ever")
	}
}

// TestRunPlanErrorNamesRunPlan: RunPlan with a nil or zero Plan said
// "StartPlan with a nil Plan", naming a method the caller did not call,
// and a Plan that is not nil.
func TestRunPlanErrorNamesRunPlan(t *testing.T) {
	a := newAsync(t)
	_, err := a.RunPlan(context.Background(), nil, time.Second)
	assert.EqualError(t, err, "asynctool: RunPlan with a nil or zero Plan (make one with Compile)")
	_, err = a.RunPlan(context.Background(), &Plan{}, time.Second)
	assert.EqualError(t, err, "asynctool: RunPlan with a nil or zero Plan (make one with Compile)")
	_, err = a.StartPlan(context.Background(), &Plan{}, time.Second)
	assert.EqualError(t, err, "asynctool: StartPlan with a nil or zero Plan (make one with Compile)")
}

// TestRunHookPanicNamesTheRun: a panic in OnRunStart or OnRunEnd, which
// are called for the whole run, was reported as `callback OnRunStart of
// node "" panicked`, as if an anonymous node's callback had panicked.
func TestRunHookPanicNamesTheRun(t *testing.T) {
	for _, method := range []string{"OnRunStart", "OnRunEnd"} {
		h := &Hooks{}
		if method == "OnRunStart" {
			h.OnRunStart = func(context.Context, RunInfo) context.Context { panic("the tracer broke") }
		} else {
			h.OnRunEnd = func(context.Context, *Report) { panic("the tracer broke") }
		}
		a := newAsync(t, WithHooks(h))
		err := a.BeginWork(context.Background(), time.Second, NewWrapper("x", okWorker(), 0))
		var cpe *CallbackPanicError
		if assert.ErrorAs(t, err, &cpe) {
			assert.Equal(t, "", cpe.ID)
			assert.Equal(t, method, cpe.Method)
			assert.Equal(t, "asynctool: hook "+method+" of the run panicked: the tracer broke", cpe.Error())
		}
	}
	cpe := &CallbackPanicError{ID: "", Method: "Result", Panic: &PanicError{Value: "x"}}
	assert.Equal(t, `asynctool: callback Result of node "" panicked: x`, cpe.Error(), "an anonymous node's callback keeps its words")
}

// TestResumeOnANilRunSaysSo: Resume on a nil Run (a Start whose error was
// not checked) said "on a released run", as Wait's error does not.
func TestResumeOnANilRunSaysSo(t *testing.T) {
	var nilRun *Run
	assert.EqualError(t, nilRun.Resume("x", Rerun()), `asynctool: Resume("x") on a nil or zero Run (Start and StartPlan return one)`)
	assert.EqualError(t, new(Run).Resume("x", Rerun()), `asynctool: Resume("x") on a nil or zero Run (Start and StartPlan return one)`)
}

// TestExponentialBackoffOutOfRange pins what ExponentialBackoff's doc
// now says of values outside its ranges: a jitter above 1 counts as 1
// (the delay stays within [0, 2d]), one below 0 or NaN as none, and a
// max below base caps every delay.
func TestExponentialBackoffOutOfRange(t *testing.T) {
	for range 100 {
		d := ExponentialBackoff(time.Millisecond, time.Second, 5)(3)
		assert.True(t, d >= 0 && d <= 8*time.Millisecond, "jitter 5 counts as 1: %v", d)
	}
	assert.Equal(t, 4*time.Millisecond, ExponentialBackoff(time.Millisecond, time.Second, -1)(3))
	assert.Equal(t, 4*time.Millisecond, ExponentialBackoff(time.Millisecond, time.Second, math.NaN())(3))
	assert.Equal(t, time.Millisecond, ExponentialBackoff(time.Second, time.Millisecond, 0)(1))
}
