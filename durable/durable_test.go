package durable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// retryNow schedules a failed job's next attempt at once, so that tests
// do not wait for River's backoff.
type retryNow struct{}

func (retryNow) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Millisecond) }

// sumArgs is a job whose graph is a diamond: a and c feed d through b.
type sumArgs struct {
	Base int `json:"base"`
}

func (sumArgs) Kind() string { return "durable_test_sum" }

// counters count, per job, how often each node's worker ran.
type counters struct {
	a, b, c, d atomic.Int32
	failB      atomic.Int32 // attempts of b that fail before it succeeds
	total      atomic.Int64 // d's value in the last attempt
}

// sumGraph builds a → b, a → c, b + c → d, every node checkpointed. b
// fails while failB is positive.
func sumGraph(cnt *counters) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			cnt.a.Add(1)
			return job.Args.Base, nil
		}), 0)
		b := Node(cp, "b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			cnt.b.Add(1)
			if cnt.failB.Add(-1) >= 0 {
				return 0, errors.New("b is down")
			}
			r, err := asynctool.ResultOf[int](all, "a")
			return r.Value * 10, err
		}), 0).Depend(a, true)
		c := Node(cp, "c", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			cnt.c.Add(1)
			r, err := asynctool.ResultOf[int](all, "a")
			return r.Value + 1, err
		}), 0).Depend(a, true)
		Node(cp, "d", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			cnt.d.Add(1)
			rb, err := asynctool.ResultOf[int](all, "b")
			if err != nil {
				return 0, err
			}
			rc, err := asynctool.ResultOf[int](all, "c")
			cnt.total.Store(int64(rb.Value + rc.Value))
			return rb.Value + rc.Value, err
		}), 0).Depend(b, true).Depend(c, true)
		return []asynctool.Wrapper{a}, nil
	}
}

// openSQLite returns a migrated SQLite database in a temporary file.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "river.db"))
	require.NoError(t, err)
	db.SetMaxOpenConns(1) // riversqlite's advice: SQLite runs one operation at a time
	t.Cleanup(func() { db.Close() })
	mig, err := rivermigrate.New(riversqlite.New(db), nil)
	require.NoError(t, err)
	_, err = mig.Migrate(context.Background(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	return db
}

// newClient returns a started River client for workers, stopped when t
// ends.
func newClient[TTx any](t *testing.T, driver riverdriver.Driver[TTx], workers *river.Workers) *river.Client[TTx] {
	return newClientIn(t, driver, "", workers)
}

// newClientIn is newClient for River's tables in schema ("": the default).
func newClientIn[TTx any](t *testing.T, driver riverdriver.Driver[TTx], schema string, workers *river.Workers) *river.Client[TTx] {
	t.Helper()
	client, err := river.NewClient[TTx](driver, &river.Config{
		Schema:            schema,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       retryNow{},
		Workers:           workers,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return client
}

// newAsync returns an Async closed when t ends.
func newAsync(t *testing.T) *asynctool.Async {
	a := asynctool.New()
	t.Cleanup(func() { a.Close() })
	return a
}

// waitFor waits for n events.
func waitFor(t *testing.T, events <-chan *river.Event, n int) []*river.Event {
	t.Helper()
	var got []*river.Event
	timeout := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case ev := <-events:
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("got %d of %d events", len(got), n)
		}
	}
	return got
}

// TestRetryResumesFromCheckpoint runs a job whose node b fails on the first
// attempt: River retries the job, and the second attempt replays a and c
// from the checkpoint instead of running them again.
func TestRetryResumesFromCheckpoint(t *testing.T) {
	db := openSQLite(t)
	cnt := &counters{}
	cnt.failB.Store(1)
	workers := river.NewWorkers()
	river.AddWorker(workers, NewWorker(newAsync(t), 10*time.Second, sumGraph(cnt)))
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()

	_, err := client.Insert(context.Background(), sumArgs{Base: 4}, nil)
	require.NoError(t, err)
	evs := waitFor(t, events, 2)

	assert.Equal(t, river.EventKindJobFailed, evs[0].Kind, "the first attempt fails")
	require.Len(t, evs[0].Job.Errors, 1)
	assert.Contains(t, evs[0].Job.Errors[0].Error, `"b" failed (b is down)`)
	assert.Contains(t, evs[0].Job.Errors[0].Error, `"d" failed`)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind, "the retry succeeds")
	assert.Equal(t, 2, evs[1].Job.Attempt)

	assert.Equal(t, int32(1), cnt.a.Load(), "a ran once: the retry replayed it")
	assert.Equal(t, int32(1), cnt.c.Load(), "c ran once: the retry replayed it")
	assert.Equal(t, int32(2), cnt.b.Load(), "b ran in both attempts")
	assert.Equal(t, int32(1), cnt.d.Load(), "d ran only when b succeeded")
	assert.Equal(t, int64(4*10+4+1), cnt.total.Load(), "replayed values feed d")
}

// TestFailingGraphIsDiscarded runs a job whose node never succeeds: every
// attempt fails with the node named, and River discards the job after its
// last attempt.
func TestFailingGraphIsDiscarded(t *testing.T) {
	db := openSQLite(t)
	cnt := &counters{}
	cnt.failB.Store(1 << 30)
	workers := river.NewWorkers()
	river.AddWorker(workers, NewWorker(newAsync(t), 10*time.Second, sumGraph(cnt)))
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobFailed)
	defer cancel()

	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 3})
	require.NoError(t, err)
	evs := waitFor(t, events, 3)

	last := evs[2].Job
	assert.Equal(t, rivertype.JobStateDiscarded, last.State)
	assert.Len(t, last.Errors, 3)
	assert.Equal(t, int32(3), cnt.b.Load())
	assert.Equal(t, int32(1), cnt.a.Load(), "a succeeded once and was replayed after")
	assert.Equal(t, int32(0), cnt.d.Load())
}

// TestBadGraphFailsTheAttempt checks that a graph asynctool rejects fails
// the attempt with the GraphError's text.
func TestBadGraphFailsTheAttempt(t *testing.T) {
	db := openSQLite(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, NewWorker(newAsync(t), time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		w := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 0, nil })
		a, b := Node(cp, "x", w, 0), Node(cp, "x", w, 0)
		b.Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}))
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobFailed)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	require.Len(t, ev.Job.Errors, 1)
	assert.Contains(t, ev.Job.Errors[0].Error, "duplicate node id")
}

func TestGraphFailedErrorUnwraps(t *testing.T) {
	cause := errors.New("backend down")
	err := error(&GraphFailedError{Failed: []NodeFailure{{ID: "b", Status: asynctool.StatusFailed, Err: cause}}})
	assert.ErrorIs(t, err, cause)
	assert.Equal(t, `durable: 1 node(s) did not succeed: "b" failed (backend down)`, err.Error())
	_ = fmt.Sprint(err)
}
