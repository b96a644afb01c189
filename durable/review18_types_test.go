package durable

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
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

// refusesType runs a job whose checkpointed node "a" has result type R
// (the worker returns want) and a failing sink b: the attempt must fail
// before any node runs, with ErrInterfaceResult naming "a" and where the
// interface is.
func refusesType[R any](t *testing.T, want R, where string) {
	t.Helper()
	var runs atomic.Int32
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, R](func(context.Context, int, asynctool.Wrappers) (R, error) {
			runs.Add(1)
			return want, nil
		}), 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			runs.Add(1)
			return 0, errors.New("b is down")
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}
	evs := runJob(t, 2, 10*time.Second, build)
	require.Len(t, evs, 2)
	require.Equal(t, rivertype.JobStateDiscarded, evs[1].Job.State)
	for _, ev := range evs {
		msg := ev.Job.Errors[len(ev.Job.Errors)-1].Error
		assert.Contains(t, msg, fmt.Sprintf("durable: node %q: result type %v %s: %v", "a", reflect.TypeFor[R](), where, ErrInterfaceResult))
	}
	assert.Zero(t, runs.Load(), "no node ran")
}

// TestS18RInterfaceResultsFailTheAttempt guards Node's refusal of a
// result type the checkpoint cannot give back: JSON records no Go type,
// so a result decoded into an interface comes back as float64,
// map[string]any and the like where the worker returned an int or a
// struct (a retry sees another value than the first attempt), and an
// interface with methods never decodes, so that its worker ran again on
// every attempt, the checkpoint unused. Such a node fails each attempt
// before any node runs, with ErrInterfaceResult, whether the interface is
// R itself or held where encoding/json decodes into it.
func TestS18RInterfaceResultsFailTheAttempt(t *testing.T) {
	t.Run("any", func(t *testing.T) { refusesType[any](t, 42, "is an interface type") })
	t.Run("error", func(t *testing.T) { refusesType[error](t, errors.New("declined"), "is an interface type") })
	t.Run("fmt.Stringer", func(t *testing.T) { refusesType[fmt.Stringer](t, time.Second, "is an interface type") })
	t.Run("map of any", func(t *testing.T) {
		refusesType(t, map[string]any{"n": 1}, "holds the interface type interface {} at [key]")
	})
	t.Run("struct field", func(t *testing.T) {
		refusesType(t, &stringer{Name: "x", Label: time.Second}, "holds the interface type fmt.Stringer at .Label")
	})
	t.Run("recursive", func(t *testing.T) {
		refusesType(t, tree{}, "holds the interface type interface {} at .Meta[key]")
	})
}

// TestS18RInterfaceCheckAllowsWhatRoundTrips checks what the check of
// result types lets through: types without an interface where
// encoding/json decodes, and types that decode themselves (UnmarshalJSON
// or UnmarshalText), whatever they hold.
func TestS18RInterfaceCheckAllowsWhatRoundTrips(t *testing.T) {
	type hidden struct {
		N       int
		Skipped any `json:"-"`
		private fmt.Stringer
		Fine    *[]map[string]int
	}
	type list struct {
		Next *list
		V    [2]json.RawMessage
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[int](),
		reflect.TypeFor[[]byte](),
		reflect.TypeFor[json.RawMessage](),
		reflect.TypeFor[map[string]json.RawMessage](),
		reflect.TypeFor[time.Time](),
		reflect.TypeFor[*cents](),
		reflect.TypeFor[hidden](),
		reflect.TypeFor[list](),
		reflect.TypeFor[selfDecoding](),
	} {
		assert.NoError(t, resultTypeErr(typ), "%v", typ)
	}
}

// selfDecoding holds an interface but decodes itself.
type selfDecoding struct{ v any }

func (s *selfDecoding) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.v) }
