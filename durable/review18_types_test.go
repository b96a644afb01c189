package durable

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for the eighteenth review of the durable module: result
// types a checkpoint cannot give back, nil Resume values, and the run's
// error when River's ctx has ended.

// shortRiverTimeout is a Worker whose River job timeout is 100ms, whatever
// the graph's deadline.
type shortRiverTimeout struct{ *Worker[sumArgs] }

func (shortRiverTimeout) Timeout(*river.Job[sumArgs]) time.Duration { return 100 * time.Millisecond }

// TestS18RCallbackPanicSurvivesRiversTimeout guards the attempt's error
// when River's ctx ends while the run is still ending: the run's error,
// with the callback panic in it, must be waited for, not replaced by
// ctx.Err(). Here a node suspends, the attempt cancels the run to park
// the job, and the node's OnNodeEnd hook, called as the cancellation ends
// the node, outlasts River's timeout and then panics. Run.Wait(ctx)
// returned ctx.Err() at once, and the attempt failed without the panic.
func TestS18RCallbackPanicSurvivesRiversTimeout(t *testing.T) {
	riverDone := make(chan (<-chan struct{}), 1)
	async := asynctool.New(asynctool.WithHooks(&asynctool.Hooks{
		OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
			if ev.ID != "approve" {
				return
			}
			<-<-riverDone
			time.Sleep(300 * time.Millisecond) // the attempt, without waiting for the run, is gone by now
			panic("the audit hook broke")
		},
	}))
	t.Cleanup(func() { async.Close() })
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		riverDone <- ctx.Done()
		approve := Node(cp, "approve", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("needs a person")
		}), 0).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{approve}, nil
	}
	events := runWorkerAs(t, shortRiverTimeout{mustWorker(t, async, 0, build)}, 1)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, rivertype.JobStateDiscarded, ev.Job.State, "River's timeout ended the attempt: no park")
	require.NotEmpty(t, ev.Job.Errors)
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, `callback OnNodeEnd of node "approve" panicked: the audit hook broke`)
}

// runWorkerAs is runWorker for any river.Worker of sumArgs.
func runWorkerAs(t *testing.T, worker river.Worker[sumArgs], maxAttempts int) []*river.Event {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient[*sql.Tx](t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: maxAttempts})
	require.NoError(t, err)
	var got []*river.Event
	for {
		ev := waitFor(t, events, 1)[0]
		got = append(got, ev)
		if ev.Kind != river.EventKindJobFailed || ev.Job.State == rivertype.JobStateDiscarded {
			return got
		}
	}
}

// stringer is a result type that holds an interface with methods.
type stringer struct {
	Name  string
	Label fmt.Stringer
}

// tree is a recursive result type that holds an interface deep down.
type tree struct {
	Kids []*tree
	Meta map[string]any
}

// typeJob runs a job of two attempts whose checkpointed node "a" has
// result type R (its worker returns want, and counts its calls in runs)
// and whose sink b fails on the first attempt only, and returns the
// events and what b read of a's result on its last call.
func typeJob[R any](t *testing.T, want R) (evs []*river.Event, runs int32, got R) {
	t.Helper()
	var calls atomic.Int32
	var mu sync.Mutex
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, R](func(context.Context, int, asynctool.Wrappers) (R, error) {
			calls.Add(1)
			return want, nil
		}), 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, _ := asynctool.ResultOf[R](all, "a")
			mu.Lock()
			got = r.Value
			mu.Unlock()
			if job.Attempt == 1 {
				return 0, errors.New("b is down")
			}
			return 0, nil
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}
	evs = runJob(t, 2, 10*time.Second, build)
	mu.Lock()
	defer mu.Unlock()
	return evs, calls.Load(), got
}

// TestS18RResultsThatDoNotComeBackFailTheNode guards the checkpoint
// against results it cannot give back. An interface type with methods
// never decodes from JSON, so such a node fails every attempt before any
// node runs; a result that does not decode back (a struct whose field of
// an interface type with methods holds a value) fails its node as it is
// checkpointed. Before, the stored JSON did not decode on the retry, and
// the worker ran again on every attempt, its checkpoint unused.
func TestS18RResultsThatDoNotComeBackFailTheNode(t *testing.T) {
	lastErr := func(ev *river.Event) string { return ev.Job.Errors[len(ev.Job.Errors)-1].Error }
	t.Run("error type", func(t *testing.T) {
		evs, runs, _ := typeJob[error](t, errors.New("declined"))
		require.Len(t, evs, 2)
		assert.Equal(t, rivertype.JobStateDiscarded, evs[1].Job.State)
		for _, ev := range evs {
			assert.Contains(t, lastErr(ev), `durable: node "a": result cannot be checkpointed: its JSON does not decode back into error`)
			assert.Contains(t, lastErr(ev), ErrUndecodableResult.Error())
		}
		assert.Equal(t, int32(2), runs, "the worker ran on each attempt, and its node failed each time")
	})
	t.Run("fmt.Stringer type", func(t *testing.T) {
		evs, runs, _ := typeJob[fmt.Stringer](t, time.Second)
		require.Len(t, evs, 2)
		assert.Contains(t, lastErr(evs[0]), ErrUndecodableResult.Error())
		assert.Equal(t, int32(2), runs)
	})
	t.Run("field holding a Stringer", func(t *testing.T) {
		evs, runs, _ := typeJob(t, &stringer{Name: "x", Label: time.Second})
		require.Len(t, evs, 2)
		assert.Equal(t, rivertype.JobStateDiscarded, evs[1].Job.State)
		for _, ev := range evs {
			assert.Contains(t, lastErr(ev), `durable: node "a": result cannot be checkpointed: its JSON does not decode back into *durable.stringer`)
		}
		assert.Equal(t, int32(2), runs, "the worker ran on each attempt, and its node failed each time")
	})
}

// TestS18RResultsThatComeBackAreReplayed checks what the checkpoint
// gives back, and that the worker is not called again for it: results
// with interfaces that decode (an any, a map[string]any, a nil field of
// an interface type with methods) come back with JSON's own types, as
// encoding/json gives them; types that decode themselves come back as
// they decode.
func TestS18RResultsThatComeBackAreReplayed(t *testing.T) {
	replayed := func(t *testing.T, runs int32, evs []*river.Event) {
		t.Helper()
		require.Len(t, evs, 2)
		require.Equal(t, river.EventKindJobCompleted, evs[1].Kind, "errors: %v", evs[1].Job.Errors)
		assert.Equal(t, int32(1), runs, "the retry replayed the checkpoint")
	}
	t.Run("any", func(t *testing.T) {
		evs, runs, got := typeJob[any](t, 42)
		replayed(t, runs, evs)
		assert.Equal(t, float64(42), got, "JSON's own type for a number")
	})
	t.Run("map of any", func(t *testing.T) {
		evs, runs, got := typeJob(t, map[string]any{"n": "one", "ok": true})
		replayed(t, runs, evs)
		assert.Equal(t, map[string]any{"n": "one", "ok": true}, got)
	})
	t.Run("recursive", func(t *testing.T) {
		want := tree{Kids: []*tree{{Meta: map[string]any{"k": "v"}}}}
		evs, runs, got := typeJob(t, want)
		replayed(t, runs, evs)
		assert.Equal(t, want, got)
	})
	t.Run("nil field of an interface type", func(t *testing.T) {
		evs, runs, got := typeJob(t, stringer{Name: "x"})
		replayed(t, runs, evs)
		assert.Equal(t, stringer{Name: "x"}, got)
	})
	t.Run("self decoding", func(t *testing.T) {
		evs, runs, got := typeJob(t, selfDecoding{v: "x"})
		replayed(t, runs, evs)
		assert.Equal(t, selfDecoding{v: "x"}, got)
	})
}

// selfDecoding holds an interface but encodes and decodes itself.
type selfDecoding struct{ v any }

func (s selfDecoding) MarshalJSON() ([]byte, error) { return json.Marshal(s.v) }

func (s *selfDecoding) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.v) }

// TestS18RResumeRefusesNilForANodeThatCannotBeNil guards Resume against
// a nil value for a node whose result type cannot be nil (an int): stored
// as JSON null, it decoded into the int as 0, and the sink went on with a
// value nobody gave, where asynctool.SucceedWith(nil) is an error within
// one process. The graph that parked the job knows which nodes cannot be
// nil, so Resume refuses such a value at once, with ErrNilValue, and
// writes nothing: the job stays parked, and a real value resumes it.
func TestS18RResumeRefusesNilForANodeThatCannotBeNil(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, events := parkApproval(t, &a, &s, &approved, &got)
	ctx := context.Background()
	for _, v := range []any{nil, (*int)(nil), []int(nil)} {
		_, err := Resume(ctx, client, id, map[string]any{"s": v})
		require.ErrorIs(t, err, ErrNilValue, "%#v", v)
		assert.ErrorContains(t, err, `the value of node "s" is nil, and its result type cannot be nil`)
	}
	// A value that is not nil but is JSON null passes Resume, which cannot
	// know it; the replay, which knows s is an int, refuses it, and the
	// job parks again.
	_, err := Resume(ctx, client, id, map[string]any{"s": json.RawMessage("null")})
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, ErrNilValue.Error())
	assert.Zero(t, got.Load(), "the sink did not read the zero value")

	_, err = Resume(ctx, client, id, map[string]any{"s": 7})
	require.NoError(t, err, "still parked")
	ev = untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.Equal(t, int64(7), got.Load())
	assert.Equal(t, int32(1), s.Load())
}

// nilGraph builds gate (failing on the second attempt) → s
// (checkpointed, PolicySuspend, failing; its result type a *int on the
// first attempt and R after it, as after a deployment that changed it) →
// sink, which calls read.
func nilGraph[R any](s *atomic.Int32, read func(all asynctool.Wrappers) error) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		gate := asynctool.NewWrapper("gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if job.Attempt == 2 {
				return 0, errors.New("gate: transient")
			}
			return 0, nil
		}), 0)
		var ns asynctool.Wrapper
		if job.Attempt == 1 {
			ns = Node(cp, "s", asynctool.WorkerFunc[int, *int](func(context.Context, int, asynctool.Wrappers) (*int, error) {
				s.Add(1)
				return nil, errors.New("needs approval")
			}), 0).Depend(gate, true).OnFailure(asynctool.PolicySuspend)
		} else {
			ns = Node(cp, "s", asynctool.WorkerFunc[int, R](func(context.Context, int, asynctool.Wrappers) (R, error) {
				s.Add(1)
				var zero R
				return zero, errors.New("needs approval")
			}), 0).Depend(gate, true).OnFailure(asynctool.PolicySuspend)
		}
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			return 0, read(all)
		}), 0).Depend(ns, true)
		return []asynctool.Wrapper{gate}, nil
	}
}

// TestS18RNilValueForANodeThatCannotBeNil guards the replay of a nil
// value Resume gave, where the node's result type is known: Resume took
// nil for s, a *int in the graph that parked the job, but later
// attempts' s is an int. JSON null decoded into the int as 0, and the
// sink read 0; now s fails with ErrNilValue (parking the job again, as it
// is under PolicySuspend) and its worker does not run. The value stays
// nil through an attempt that fails before s (the gate) and through a
// Resume without values, until a Resume gives s a value.
func TestS18RNilValueForANodeThatCannotBeNil(t *testing.T) {
	var s atomic.Int32
	var reads atomic.Int32
	var got atomic.Int64
	client, id, events := runParked(t, nilGraph[int](&s, func(all asynctool.Wrappers) error {
		reads.Add(1)
		r, err := asynctool.ResultOf[int](all, "s")
		got.Store(int64(r.Value))
		return err
	}))
	want := fmt.Sprintf(`durable: node "s": the value Resume gave is null, and int cannot be nil: %v`, ErrNilValue)
	_, err := Resume(context.Background(), client, id, map[string]any{"s": nil})
	require.NoError(t, err, "a *int can be nil")
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	require.Equal(t, 3, ev.Job.Attempt, "the second attempt failed at the gate")
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, want)

	_, err = Resume(context.Background(), client, id, nil)
	require.NoError(t, err)
	ev = untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, want)
	assert.Zero(t, reads.Load(), "the sink did not run")
	assert.Equal(t, int32(1), s.Load(), "s's worker did not run again")

	_, err = Resume(context.Background(), client, id, map[string]any{"s": 5})
	require.NoError(t, err)
	ev = untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.Equal(t, int64(5), got.Load())
	assert.Equal(t, int32(1), s.Load())
}

// TestS18RNilValueForAPointerNode checks that a nil value is a value for
// a node whose result type can be nil: the node replays nil.
func TestS18RNilValueForAPointerNode(t *testing.T) {
	var s atomic.Int32
	var isNil atomic.Bool
	client, id, events := runParked(t, nilGraph[*int](&s, func(all asynctool.Wrappers) error {
		r, err := asynctool.ResultOf[*int](all, "s")
		isNil.Store(r.Value == nil)
		return err
	}))
	_, err := Resume(context.Background(), client, id, map[string]any{"s": nil})
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.True(t, isNil.Load())
	assert.Equal(t, int32(1), s.Load())
}
