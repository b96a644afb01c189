package durable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Regression tests for the user text (node ids, error messages, panic
// values) that reaches a job's row: PostgreSQL's jsonb, where River keeps
// the metadata and the errors of a job, cannot hold a NUL character.

// failingWith builds a (checkpointed) → b, b failing with err.
func failingWith(err error) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 1, nil
		}), 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, err
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}
}

// suspendedWithError builds a (checkpointed) → s (checkpointed,
// PolicySuspend), s failing with err.
func suspendedWithError(err error) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 1, nil
		}), 0)
		Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, err
		}), 0).Depend(a, true).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{a}, nil
	}
}

// withID builds one node with id, checkpointed or not, that fails under
// PolicySuspend if suspend is set and succeeds otherwise; runs counts its
// worker's runs.
func withID(id string, checkpointed, suspend bool, runs *atomic.Int32) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		w := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			runs.Add(1)
			if suspend {
				return 0, errors.New("needs review")
			}
			return 1, nil
		})
		n := asynctool.NewWrapper(id, w, 0)
		if checkpointed {
			n = Node(cp, id, w, 0)
		}
		if suspend {
			n.OnFailure(asynctool.PolicySuspend)
		}
		return []asynctool.Wrapper{n}, nil
	}
}

// TestNodeIDsMustBeStorable guards Work's check of node ids: an id with
// a NUL character, which PostgreSQL cannot store, or with invalid UTF-8,
// which encoding/json stores as U+FFFD, so that a retry would not find
// the node's result under its id, fails the attempt before any node
// runs, with ErrUnstorableID and the id, on SQLite as on PostgreSQL. Ids
// reach the row as the checkpoint's keys and in the park mark, which
// lists the suspended nodes whether checkpointed or not.
func TestNodeIDsMustBeStorable(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		id                    string
		checkpointed, suspend bool
	}{
		{"NUL in a checkpointed id", "price\x00v2", true, false},
		{"invalid UTF-8 in a checkpointed id", "caf\xe9", true, false},
		{"NUL in a suspended node's id", "review\x00", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			evs := runJob(t, 1, 10*time.Second, withID(tc.id, tc.checkpointed, tc.suspend, &runs))
			require.Len(t, evs, 1)
			ev := evs[0]
			require.Equal(t, rivertype.JobStateDiscarded, ev.Job.State, "the attempt fails")
			msg := ev.Job.Errors[len(ev.Job.Errors)-1].Error
			assert.Contains(t, msg, fmt.Sprintf("durable: node id %q: %v", tc.id, ErrUnstorableID))
			assert.Zero(t, runs.Load(), "no node ran")
		})
	}
}

// TestErrorTextIsStorable guards the substitution Work makes in the text
// of the error River stores: a NUL character, which PostgreSQL cannot
// store, becomes U+FFFD, on SQLite as on PostgreSQL.
func TestErrorTextIsStorable(t *testing.T) {
	evs := runJob(t, 1, 10*time.Second, failingWith(errors.New("card\x00declined")))
	require.Len(t, evs, 1)
	msg := evs[0].Job.Errors[len(evs[0].Job.Errors)-1].Error
	assert.Contains(t, msg, `"b" failed (card`+"\uFFFD"+`declined)`)
	assert.NotContains(t, msg, "\x00")
}

// TestStorableKeepsTheError checks that the error whose text Work
// changes still is the error the attempt ended with, for River (its
// JobCancel) and for errors.Is and errors.As; an error without a NUL is
// returned as it is.
func TestStorableKeepsTheError(t *testing.T) {
	cause := errors.New("card\x00declined")
	graph := &GraphFailedError{Failed: []NodeFailure{{ID: "b", Status: asynctool.StatusFailed, Err: cause}}}
	err := storable(river.JobCancel(graph))
	assert.Equal(t, strings.ReplaceAll(river.JobCancel(graph).Error(), "\x00", "\uFFFD"), err.Error())
	assert.ErrorIs(t, err, cause)
	var cancel *rivertype.JobCancelError
	assert.ErrorAs(t, err, &cancel, "River still sees the cancellation")
	var got *GraphFailedError
	require.ErrorAs(t, err, &got)
	assert.Same(t, graph, got)

	plain := errors.New("card declined")
	assert.Same(t, plain, storable(plain))
	assert.NoError(t, storable(nil))
}

// panicking builds nothing: its BuildFunc panics with v.
func panicking(v any) BuildFunc[sumArgs] {
	return func(context.Context, *river.Job[sumArgs], *Checkpoint) ([]asynctool.Wrapper, error) {
		panic(v)
	}
}

// panicHandler records the value of the panic River reports.
type panicHandler struct{ got atomic.Value }

func (h *panicHandler) HandleError(context.Context, *rivertype.JobRow, error) *river.ErrorHandlerResult {
	return nil
}

func (h *panicHandler) HandlePanic(_ context.Context, _ *rivertype.JobRow, v any, _ string) *river.ErrorHandlerResult {
	h.got.Store(v)
	return nil
}

// TestBuildPanicTextIsStorable guards the substitution for a panic of
// the BuildFunc, which River records with its value's text: a value
// whose text holds a NUL character reaches River as a *StorablePanic,
// whose text has U+FFFD instead and which holds the value; River's trace
// still shows where the BuildFunc panicked.
func TestBuildPanicTextIsStorable(t *testing.T) {
	cause := errors.New("bad\x00input")
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, panicking(cause)))
	handler := &panicHandler{}
	client, err := river.NewClient(riversqlite.New(openSQLite(t)), &river.Config{
		ErrorHandler:      handler,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Workers:           workers,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	events, cancel := client.Subscribe(river.EventKindJobFailed)
	defer cancel()
	_, err = client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	rec := ev.Job.Errors[len(ev.Job.Errors)-1]
	assert.Equal(t, "bad\uFFFDinput", rec.Error)
	assert.Contains(t, rec.Trace, "review17_test.go", "the trace shows the BuildFunc's panic")
	var p *StorablePanic
	require.IsType(t, p, handler.got.Load())
	p = handler.got.Load().(*StorablePanic)
	assert.Same(t, cause, p.Value, "the value is kept")
	assert.ErrorIs(t, p, cause)
}

// TestStorablePanicOnlyForNUL checks that a BuildFunc's panic whose text
// holds no NUL reaches River as it is.
func TestStorablePanicOnlyForNUL(t *testing.T) {
	evs := runJob(t, 1, 10*time.Second, panicking("plain"))
	require.Len(t, evs, 1)
	assert.Equal(t, "plain", evs[0].Job.Errors[len(evs[0].Job.Errors)-1].Error)
}

// healthyBase marks the job recordOnPostgres runs beside the one under
// test: its graph is one node that succeeds after a while, so that it
// ends after the other job.
const healthyBase = 2

// recordOnPostgres runs build's job once on PostgreSQL, beside a healthy
// job of the same client, and returns the event that recorded its end:
// neither job may stay running because jsonb refused the update that
// records one of them (River's completer retries a failed batch for
// ever, with every job that ends after it).
func recordOnPostgres(t *testing.T, build BuildFunc[sumArgs]) (*river.Client[pgx.Tx], *river.Event) {
	t.Helper()
	url, schema := pgSchema(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		if job.Args.Base == healthyBase {
			return []asynctool.Wrapper{asynctool.NewWrapper("ok", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				time.Sleep(300 * time.Millisecond)
				return 1, nil
			}), 0)}, nil
		}
		return build(ctx, job, cp)
	}))
	client := newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, workers, retryNow{})
	events, cancel := client.Subscribe(river.EventKindJobFailed, river.EventKindJobCompleted, river.EventKindJobCancelled)
	defer cancel()
	ctx := context.Background()
	res, err := client.Insert(ctx, sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	healthy, err := client.Insert(ctx, sumArgs{Base: healthyBase}, nil)
	require.NoError(t, err)
	var got, ok *river.Event
	timeout := time.After(20 * time.Second)
	for got == nil || ok == nil {
		select {
		case ev := <-events:
			switch ev.Job.ID {
			case res.Job.ID:
				got = ev
			case healthy.Job.ID:
				ok = ev
			}
		case <-timeout:
			var states []string
			for _, id := range []int64{res.Job.ID, healthy.Job.ID} {
				row, err := client.JobGet(ctx, id)
				require.NoError(t, err)
				states = append(states, string(row.State))
				_, _ = client.JobCancel(ctx, id) // let the cleanup's Stop finish, if it can
			}
			t.Fatalf("after 20 s the job under test is %s, the healthy one %s", states[0], states[1])
		}
	}
	assert.Equal(t, river.EventKindJobCompleted, ok.Kind, "the healthy job")
	return client, got
}

// lastError is the text of the last error River recorded for ev's job.
func lastError(t *testing.T, ev *river.Event) string {
	t.Helper()
	require.NotEmpty(t, ev.Job.Errors)
	return ev.Job.Errors[len(ev.Job.Errors)-1].Error
}

// TestNULsDoNotWedgeJobsOnPostgres is the tests above on PostgreSQL,
// where the faults showed: the update that records the attempt (its
// error, its checkpoint) held \u0000, jsonb refused it, and the job
// stayed running, with every job whose end the client recorded after it,
// until River's rescuer; the client's Stop could not finish either.
func TestNULsDoNotWedgeJobsOnPostgres(t *testing.T) {
	nul := errors.New("card\x00declined")
	const sub = "card\uFFFDdeclined"
	t.Run("a node's error", func(t *testing.T) {
		_, ev := recordOnPostgres(t, failingWith(nul))
		assert.Equal(t, river.EventKindJobFailed, ev.Kind)
		assert.Contains(t, lastError(t, ev), `"b" failed (`+sub+`)`)
	})
	t.Run("a node's JobCancel", func(t *testing.T) {
		_, ev := recordOnPostgres(t, failingWith(river.JobCancel(nul)))
		assert.Equal(t, river.EventKindJobCancelled, ev.Kind)
		assert.Contains(t, lastError(t, ev), sub)
	})
	t.Run("a suspended node's error", func(t *testing.T) {
		client, ev := recordOnPostgres(t, suspendedWithError(nul))
		require.Equal(t, river.EventKindJobCancelled, ev.Kind)
		assert.Contains(t, lastError(t, ev), `suspended at "s" (`+sub+`)`)
		_, err := Resume(context.Background(), client, ev.Job.ID, map[string]any{"s": 1})
		assert.NoError(t, err, "parked: the checkpoint and its mark were stored")
	})
	t.Run("the BuildFunc's error", func(t *testing.T) {
		_, ev := recordOnPostgres(t, func(context.Context, *river.Job[sumArgs], *Checkpoint) ([]asynctool.Wrapper, error) {
			return nil, nul
		})
		assert.Equal(t, river.EventKindJobFailed, ev.Kind)
		assert.Contains(t, lastError(t, ev), "durable: building the graph: "+sub)
	})
	t.Run("the BuildFunc's panic", func(t *testing.T) {
		_, ev := recordOnPostgres(t, panicking(nul))
		assert.Equal(t, river.EventKindJobFailed, ev.Kind)
		assert.Equal(t, sub, lastError(t, ev))
	})
	t.Run("a checkpointed node's id", func(t *testing.T) {
		// The checkpoint is stored when an attempt fails: b makes it fail.
		var runs atomic.Int32
		inner := withID("price\x00v2", true, false, &runs)
		_, ev := recordOnPostgres(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			starts, err := inner(ctx, job, cp)
			asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				return 0, errors.New("b is down")
			}), 0).Depend(starts[0], true)
			return starts, err
		})
		assert.Equal(t, river.EventKindJobFailed, ev.Kind)
		assert.Contains(t, lastError(t, ev), ErrUnstorableID.Error())
		assert.Zero(t, runs.Load())
	})
	t.Run("a suspended node's id", func(t *testing.T) {
		var runs atomic.Int32
		_, ev := recordOnPostgres(t, withID("review\x00", false, true, &runs))
		assert.Equal(t, river.EventKindJobFailed, ev.Kind)
		assert.Contains(t, lastError(t, ev), ErrUnstorableID.Error())
		assert.Zero(t, runs.Load())
	})
}
