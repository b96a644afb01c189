package durable

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertest"
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
	return newClientIn(t, driver, "", workers, retryNow{})
}

// newClientIn is newClient for River's tables in schema ("": the
// default), with retry as the retry policy.
func newClientIn[TTx any](t *testing.T, driver riverdriver.Driver[TTx], schema string, workers *river.Workers, retry river.ClientRetryPolicy) *river.Client[TTx] {
	t.Helper()
	client := testClient(t, driver, &river.Config{Schema: schema, RetryPolicy: retry, Workers: workers})
	startClient(t, client)
	return client
}

// testClient returns a River client for driver with config, whose
// Logger, Queues, FetchCooldown and FetchPollInterval, where unset, are
// the tests': no log, four workers, and fetches every 5 to 20 ms.
func testClient[TTx any](t *testing.T, driver riverdriver.Driver[TTx], config *river.Config) *river.Client[TTx] {
	t.Helper()
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	if config.Queues == nil {
		config.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}
	}
	config.FetchCooldown = cmp.Or(config.FetchCooldown, 5*time.Millisecond)
	config.FetchPollInterval = cmp.Or(config.FetchPollInterval, 20*time.Millisecond)
	client, err := river.NewClient[TTx](driver, config)
	require.NoError(t, err)
	return client
}

// startClient starts client, stopped when t ends. Stopping a client
// twice is fine: the cleanup's Stop of a stopped client returns nil.
func startClient[TTx any](t *testing.T, client *river.Client[TTx]) {
	t.Helper()
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
}

// mustWorker is NewWorker for arguments known to be valid.
func mustWorker[A river.JobArgs](t *testing.T, a *asynctool.Async, timeout time.Duration, build BuildFunc[A]) *Worker[A] {
	t.Helper()
	w, err := NewWorker(a, timeout, build)
	require.NoError(t, err)
	return w
}

// newAsync returns an Async closed when t ends.
func newAsync(t *testing.T) *asynctool.Async {
	a := asynctool.New()
	t.Cleanup(func() { a.Close() })
	return a
}

// releaser returns a function that closes gate once, and also closes it
// when the test ends: a worker that waits for gate and ignores its ctx
// would otherwise keep the Async's Close, in an earlier cleanup (see
// newAsync), waiting forever when the test fails before it releases the
// worker. Call it after newAsync: cleanups run last registered first.
func releaser(t *testing.T, gate chan struct{}) func() {
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	return release
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
	cnt := &counters{}
	cnt.failB.Store(1)
	worker := mustWorker(t, newAsync(t), 10*time.Second, sumGraph(cnt))
	evs := runWorker(t, openSQLite(t), worker, sumArgs{Base: 4}, 3)
	require.Len(t, evs, 2)

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
	cnt := &counters{}
	cnt.failB.Store(1 << 30)
	evs := runJob(t, 3, 10*time.Second, sumGraph(cnt))
	require.Len(t, evs, 3)

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
	evs := runJob(t, 1, time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		w := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 0, nil })
		a, b := Node(cp, "x", w, 0), Node(cp, "x", w, 0)
		b.Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	})
	require.Len(t, evs, 1)
	ev := evs[0]
	require.Len(t, ev.Job.Errors, 1)
	assert.Contains(t, ev.Job.Errors[0].Error, "duplicate node id")
}

func TestGraphFailedErrorUnwraps(t *testing.T) {
	cause, runErr := errors.New("backend down"), errors.New("run cancelled")
	err := error(&GraphFailedError{Failed: []NodeFailure{{ID: "b", Status: asynctool.StatusFailed, Err: cause}}, RunErr: runErr})
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, err, runErr)
	assert.Equal(t, `durable: 1 node(s) did not succeed: "b" failed (backend down); run: run cancelled`, err.Error())
	assert.Equal(t, "durable: the run failed: run cancelled", (&GraphFailedError{RunErr: runErr}).Error())
	anonymous := &GraphFailedError{Failed: []NodeFailure{{Index: 2, Status: asynctool.StatusFailed, Err: cause}}}
	assert.Equal(t, `durable: 1 node(s) did not succeed: #2 failed (backend down)`, anonymous.Error(), "a node without an id is named by its index, not \"\"")
}

// TestAnonymousNodeFailureIsNamedByItsIndex: an attempt whose node
// without an id failed named it "" in its error; it names it "#" and its
// index, as asynctool's errors do.
func TestAnonymousNodeFailureIsNamedByItsIndex(t *testing.T) {
	evs := runJob(t, 1, time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		ok := asynctool.NewWrapper("ok", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil }), 0)
		asynctool.NewWrapper("", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("a down")
		}), 0).Depend(ok, true)
		return []asynctool.Wrapper{ok}, nil
	})
	require.Len(t, evs, 1)
	require.Len(t, evs[0].Job.Errors, 1)
	assert.Contains(t, evs[0].Job.Errors[0].Error, `durable: 1 node(s) did not succeed: #1 failed (a down)`)
}

func TestNewWorkerChecksItsArguments(t *testing.T) {
	a := newAsync(t)
	build := sumGraph(&counters{})
	_, err := NewWorker[sumArgs](nil, 0, build)
	assert.ErrorContains(t, err, "nil Async")
	_, err = NewWorker[sumArgs](a, 0, nil)
	assert.ErrorContains(t, err, "nil BuildFunc")
	_, err = NewWorker(a, -time.Second, build)
	assert.ErrorContains(t, err, "negative timeout")
	w := mustWorker(t, a, 5*time.Second, build)
	assert.Equal(t, 6*time.Second, w.Timeout(nil), "River's timeout leaves the graph's deadline first")
	assert.Equal(t, time.Duration(0), mustWorker(t, a, 0, build).Timeout(nil), "no deadline: River's default")
	// A second more than the largest Duration overflowed to a negative
	// timeout, which River reads as none, or as -1's "no timeout".
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second/2, math.MaxInt64 - time.Second} {
		assert.Equal(t, time.Duration(math.MaxInt64), mustWorker(t, a, d, build).Timeout(nil), "graph timeout %d", int64(d))
	}
}

// TestWorkerNotMadeByNewWorker: a Worker declared as a zero value and
// registered with river.AddWorker called its nil BuildFunc, and every
// attempt of every job panicked with a nil dereference, which says
// nothing of the cause. Its attempts now fail with an error that says to
// make the Worker with NewWorker. So do those of a nil *Worker, what
// NewWorker returns with its error (one ignored, say): River called the
// Middleware that *Worker gets from river.WorkerDefaults, which panicked
// on the nil pointer before Work was reached.
func TestWorkerNotMadeByNewWorker(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    *Worker[sumArgs]
		want string
	}{
		{"zero", &Worker[sumArgs]{}, "durable: a Worker must be made with NewWorker: this one has no BuildFunc nor Async"},
		{"nil", nil, "durable: the Worker is nil: make it with NewWorker, and check its error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Zero(t, tc.w.Timeout(nil))
			evs := runWorker(t, openSQLite(t), tc.w, sumArgs{Base: 1}, 1)
			require.Len(t, evs, 1)
			require.Len(t, evs[0].Job.Errors, 1)
			e := evs[0].Job.Errors[0]
			assert.Equal(t, tc.want, e.Error)
			assert.Empty(t, e.Trace, "an error, not a panic")
		})
	}
}

// runJob runs one job, sumArgs{Base: 1}, of a graph built by build on
// a fresh SQLite database: see runWorker.
func runJob(t *testing.T, maxAttempts int, timeout time.Duration, build BuildFunc[sumArgs]) []*river.Event {
	t.Helper()
	return runWorker(t, openSQLite(t), mustWorker(t, newAsync(t), timeout, build), sumArgs{Base: 1}, maxAttempts)
}

// runWorker runs one job with args on db with worker and returns its
// events (failed attempts, completion, cancellation) until the job
// completes, is cancelled, or is discarded after its last attempt.
func runWorker(t *testing.T, db *sql.DB, worker *Worker[sumArgs], args sumArgs, maxAttempts int) []*river.Event {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	defer cancel()
	_, err := client.Insert(context.Background(), args, &river.InsertOpts{MaxAttempts: maxAttempts})
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

func intNode(cp *Checkpoint, id string, runs *atomic.Int32, err error) *asynctool.WorkerWrapper[int, int] {
	return Node(cp, id, asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
		runs.Add(1)
		return 1, err
	}), 0)
}

// tolerated builds ok and bad, both upstreams of sink, bad an optional
// one that fails with badErr: ok ends only after bad has, so that bad
// always runs (instead of being skipped once the sink no longer needs it).
func tolerated(ok, bad, sink *atomic.Int32, badErr error) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		badEnded := make(chan struct{})
		a := Node(cp, "ok", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			ok.Add(1)
			<-badEnded
			return 1, nil
		}), 0)
		b := Node(cp, "bad", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			bad.Add(1)
			close(badEnded)
			return 0, badErr
		}), 0)
		intNode(cp, "sink", sink, nil).Depend(a, true).Depend(b, false)
		return []asynctool.Wrapper{a, b}, nil
	}
}

// TestToleratedFailureSucceeds checks that a failure the graph tolerates
// (an optional upstream that fails) does not fail the job: the sinks
// decide.
func TestToleratedFailureSucceeds(t *testing.T) {
	var ok, bad, sink atomic.Int32
	evs := runJob(t, 3, 5*time.Second, tolerated(&ok, &bad, &sink, errors.New("recommendations are down")))
	require.Len(t, evs, 1)
	assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind)
	assert.Equal(t, int32(1), bad.Load(), "bad ran and failed")
	assert.Equal(t, int32(1), sink.Load())
}

// TestCancelFromAToleratedNode checks that river.JobCancel reaches River
// even from a node the graph tolerates.
func TestCancelFromAToleratedNode(t *testing.T) {
	var ok, bad, sink atomic.Int32
	evs := runJob(t, 3, 5*time.Second, tolerated(&ok, &bad, &sink, river.JobCancel(errors.New("the order was withdrawn"))))
	require.Len(t, evs, 1)
	ev := evs[0]
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind)
	assert.Equal(t, rivertype.JobStateCancelled, ev.Job.State)
}

// TestDeadlineOnANodeNoSinkNeeds checks that the group deadline stopping a
// node the sink no longer needs does not fail the job.
func TestDeadlineOnANodeNoSinkNeeds(t *testing.T) {
	var sink atomic.Int32
	slowStarted := make(chan struct{})
	evs := runJob(t, 1, 2*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		slow := Node(cp, "slow", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			close(slowStarted)
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		fast := Node(cp, "fast", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			<-slowStarted // slow is running, so it cannot be skipped
			return 1, nil
		}), 0)
		intNode(cp, "sink", &sink, nil).Depend(fast, false).Depend(slow, false)
		return []asynctool.Wrapper{slow, fast}, nil
	})
	require.Len(t, evs, 1)
	assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind)
	assert.Equal(t, int32(1), sink.Load())
}

// sqliteSave returns a SaveFunc that stores the cursor in db with River's
// transactional checkpoint. before, if not nil, runs first and can fail
// the save; after, if not nil, runs once the save committed.
func sqliteSave(db *sql.DB, before func() error, after func()) SaveFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cursor map[string]json.RawMessage) error {
		if before != nil {
			if err := before(); err != nil {
				return err
			}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := river.ResumableSetStepCursorTx[*riversqlite.Driver](ctx, tx, job, cursor); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if after != nil {
			after()
		}
		return nil
	}
}

// TestSaveEachFailureRetriesTheSaveNotTheWorker checks that when saving
// a node's result fails and asynctool retries the node, the retry saves
// the result it has instead of calling the worker again.
func TestSaveEachFailureRetriesTheSaveNotTheWorker(t *testing.T) {
	db := openSQLite(t)
	var a, failures atomic.Int32
	failures.Store(1)
	worker := mustWorker(t, newAsync(t), 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{intNode(cp, "a", &a, nil).Retry(asynctool.RetryPolicy{Attempts: 3})}, nil
	}).SaveEach(sqliteSave(db, func() error {
		if failures.Add(-1) >= 0 {
			return errors.New("database busy")
		}
		return nil
	}, nil))
	evs := runWorker(t, db, worker, sumArgs{}, 1)
	require.Len(t, evs, 1)
	assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind)
	assert.Equal(t, int32(1), a.Load(), "a's worker ran once; its retry only saved again")
}

// TestSavesAreOneAtATimeAndEndWithTheRun checks SaveEach's promises: no
// two saves overlap, and a worker that ignores its ctx and succeeds after
// the run ended saves nothing. The run ends when stop, under PolicyEnd,
// fails once the 20 quick nodes have saved and late has started; late
// returns success only after the test has seen the attempt fail. Nothing
// here races a deadline: an earlier form ended the run with a 150 ms group
// deadline, which a slow machine reached after 6 of the 20 saves, and a
// 10 s one was reached after 10 of them on a machine loaded with other
// test runs. The 25 s deadline only ends a run whose saves fail, before
// waitFor's 30 s.
func TestSavesAreOneAtATimeAndEndWithTheRun(t *testing.T) {
	db := openSQLite(t)
	var inSave, overlaps, saves, committed atomic.Int32
	var runEnded atomic.Bool
	allSaved, lateStarted, release, lateDone := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	worker := mustWorker(t, newAsync(t), 25*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		var starts []asynctool.Wrapper
		for k := range 20 {
			var n atomic.Int32
			starts = append(starts, intNode(cp, fmt.Sprint("n", k), &n, nil))
		}
		starts = append(starts, Node(cp, "late", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			defer close(lateDone)
			close(lateStarted)
			<-release // ignores its ctx
			return 1, nil
		}), 0))
		stop := Node(cp, "stop", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			for _, ch := range []chan struct{}{allSaved, lateStarted} {
				select {
				case <-ch:
				case <-ctx.Done(): // a save failed: the deadline ends the run
					return 0, ctx.Err()
				}
			}
			return 0, errors.New("stop")
		}), 0).OnFailure(asynctool.PolicyEnd)
		return append(starts, stop), nil
	}).SaveEach(sqliteSave(db, func() error {
		if inSave.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inSave.Add(-1)
		time.Sleep(time.Millisecond) // long enough for overlaps to show
		saves.Add(1)
		if runEnded.Load() {
			return errors.New("saved after the run ended")
		}
		return nil
	}, func() {
		if committed.Add(1) == 20 {
			close(allSaved)
		}
	}))
	releaseLate := releaser(t, release)
	evs := runWorker(t, db, worker, sumArgs{}, 1)
	require.Len(t, evs, 1)
	runEnded.Store(true)
	releaseLate()
	<-lateDone
	time.Sleep(50 * time.Millisecond) // a late save, if any, would have begun
	assert.Equal(t, river.EventKindJobFailed, evs[0].Kind, "stop ended the run")
	require.NotEmpty(t, evs[0].Job.Errors)
	assert.Contains(t, evs[0].Job.Errors[0].Error, `"stop"`, "stop's failure ended the run, not the deadline")
	assert.Equal(t, int32(20), committed.Load(), "the 20 quick nodes' saves committed")
	assert.Equal(t, int32(20), saves.Load(), "the 20 quick nodes saved; late did not")
	assert.Zero(t, overlaps.Load())
}

// TestNoSaveAfterTheDeadline checks the same promise when the group
// deadline ends the run: late, which ignores its ctx, returns success
// only after the test has seen the attempt fail, and saves nothing.
func TestNoSaveAfterTheDeadline(t *testing.T) {
	db := openSQLite(t)
	var saves atomic.Int32
	lateStarted, release, lateDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	worker := mustWorker(t, newAsync(t), time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{Node(cp, "late", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			defer close(lateDone)
			close(lateStarted)
			<-release // ignores its ctx
			return 1, nil
		}), 0)}, nil
	}).SaveEach(sqliteSave(db, func() error {
		saves.Add(1)
		return nil
	}, nil))
	releaseLate := releaser(t, release)
	evs := runWorker(t, db, worker, sumArgs{}, 1)
	require.Len(t, evs, 1)
	releaseLate()
	// A node that has not started when the deadline passes never starts;
	// then there is no late success to test.
	select {
	case <-lateStarted:
	case <-time.After(10 * time.Second):
		t.Skip("late had not started when the 1 s deadline passed")
	}
	<-lateDone
	time.Sleep(50 * time.Millisecond) // a late save, if any, would have begun
	assert.Equal(t, river.EventKindJobFailed, evs[0].Kind, "late is a sink and timed out")
	assert.Zero(t, saves.Load(), "late succeeded after the run ended")
}

// TestTimedOutSinkFailsTheAttempt checks that the group deadline applies:
// a sink still running at the deadline fails the attempt as timed out.
func TestTimedOutSinkFailsTheAttempt(t *testing.T) {
	evs := runJob(t, 1, 50*time.Millisecond, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		slow := Node(cp, "slow", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), 0)
		return []asynctool.Wrapper{slow}, nil
	})
	require.Len(t, evs, 1)
	require.Len(t, evs[0].Job.Errors, 1)
	assert.Contains(t, evs[0].Job.Errors[0].Error, `"slow" timed out`)
}

// TestStaleCheckpointRunsAgain changes a node's result type between two
// attempts, as a deployment would: the stored string does not decode into
// an int, so the node runs again instead of replaying it.
func TestStaleCheckpointRunsAgain(t *testing.T) {
	var asString, asInt, b atomic.Int32
	evs := runJob(t, 3, 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		if job.Attempt == 1 {
			a := Node(cp, "a", asynctool.WorkerFunc[int, string](func(context.Context, int, asynctool.Wrappers) (string, error) {
				asString.Add(1)
				return "one", nil
			}), 0)
			intNode(cp, "b", &b, errors.New("b is down")).Depend(a, true)
			return []asynctool.Wrapper{a}, nil
		}
		a := intNode(cp, "a", &asInt, nil)
		intNode(cp, "b", &b, nil).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	})
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, int32(1), asString.Load())
	assert.Equal(t, int32(1), asInt.Load(), "the int node ran: the stored string is not an int")
}

// TestCheckpointDropsNodesTheGraphLost checks that a checkpoint keeps only
// the nodes of the attempt that stored it: old succeeds in attempt 1, is
// missing from attempt 2, and runs again when attempt 3 brings it back.
func TestCheckpointDropsNodesTheGraphLost(t *testing.T) {
	var a, old, b atomic.Int32
	evs := runJob(t, 3, 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &a, nil)
		var err error
		if job.Attempt < 3 {
			err = errors.New("b is down")
		}
		intNode(cp, "b", &b, err).Depend(na, true)
		if job.Attempt != 2 {
			intNode(cp, "old", &old, nil).Depend(na, true)
		}
		return []asynctool.Wrapper{na}, nil
	})
	require.Len(t, evs, 3)
	assert.Equal(t, river.EventKindJobCompleted, evs[2].Kind)
	assert.Equal(t, int32(1), a.Load(), "a was replayed in attempts 2 and 3")
	assert.Equal(t, int32(3), b.Load())
	assert.Equal(t, int32(2), old.Load(), "old ran in attempts 1 and 3: attempt 2's checkpoint dropped it")
}

// TestSaveEachStoresAtOnce checks that with SaveEach, a node's result is
// in the job's row while the attempt is still running, where a process
// that died now would find it.
func TestSaveEachStoresAtOnce(t *testing.T) {
	db := openSQLite(t)
	release := make(chan struct{})
	saves := make(chan struct{}, 4)
	worker := mustWorker(t, newAsync(t), 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 41, nil
		}), 0)
		Node(cp, "b", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			select {
			case <-release:
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}).SaveEach(sqliteSave(db, nil, func() { saves <- struct{}{} }))
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	res, err := client.Insert(context.Background(), sumArgs{}, nil)
	require.NoError(t, err)

	select {
	case <-saves:
	case <-time.After(30 * time.Second):
		t.Fatal("a's checkpoint was not saved")
	}
	row, err := client.JobGet(context.Background(), res.Job.ID)
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateRunning, row.State, "b is still running")
	var meta map[string]any
	require.NoError(t, json.Unmarshal(row.Metadata, &meta))
	cursors, _ := json.Marshal(meta["river:resumable_cursor"])
	assert.JSONEq(t, `{"asynctool-graph":{"a":41}}`, string(cursors), "metadata: %s", row.Metadata)

	close(release)
	waitFor(t, events, 1)
	assert.Len(t, saves, 1, "b was saved too")
}

// TestSnoozeKeepsTheCheckpoint checks that a node's river.JobSnooze
// snoozes the job and stores the checkpoint: after the snooze, a is
// replayed and b runs again.
func TestSnoozeKeepsTheCheckpoint(t *testing.T) {
	var a, b atomic.Int32
	evs := runJob(t, 3, 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &a, nil)
		Node(cp, "b", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if b.Add(1) == 1 {
				return 0, river.JobSnooze(time.Millisecond)
			}
			return 1, nil
		}), 0).Depend(na, true)
		return []asynctool.Wrapper{na}, nil
	})
	require.Len(t, evs, 1, "a snooze is not a failed attempt")
	assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind)
	assert.Equal(t, int32(1), a.Load(), "a was replayed after the snooze")
	assert.Equal(t, int32(2), b.Load())
}

// TestRetryOfACompletedJobReplays retries a completed job by hand: without
// SaveEach the row still holds the checkpoint of the last failed attempt,
// so a and c are replayed and b and d run again.
func TestRetryOfACompletedJobReplays(t *testing.T) {
	db := openSQLite(t)
	cnt := &counters{}
	cnt.failB.Store(1)
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, sumGraph(cnt)))
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	waitFor(t, events, 1)
	_, err = client.JobRetry(context.Background(), res.Job.ID)
	require.NoError(t, err)
	waitFor(t, events, 1)

	assert.Equal(t, int32(1), cnt.a.Load())
	assert.Equal(t, int32(1), cnt.c.Load())
	assert.Equal(t, int32(3), cnt.b.Load(), "b: failed, succeeded, ran again")
	assert.Equal(t, int32(2), cnt.d.Load())
}

// TestSuspendParksTheJob runs a graph whose node s fails under
// PolicySuspend until it is approved. The attempt parks the job
// (cancelled, with a *SuspendedError naming s) as soon as the branch that
// does not need s has ended, long before the minute-long deadline; a
// JobRetry after the approval replays a and side, runs s again and
// completes the job.
func TestSuspendParksTheJob(t *testing.T) {
	db := openSQLite(t)
	var a, side, s, sink atomic.Int32
	var approved atomic.Bool
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		sFailed := make(chan struct{})
		na := intNode(cp, "a", &a, nil)
		ns := Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			s.Add(1)
			if !approved.Load() {
				close(sFailed)
				return 0, errors.New("waiting for a manual review")
			}
			return 2, nil
		}), 0).Depend(na, true).OnFailure(asynctool.PolicySuspend)
		// side ends only after s has suspended, so that the attempt must
		// wait for it: the branches that do not need s run to their end.
		nside := Node(cp, "side", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			side.Add(1)
			select {
			case <-sFailed:
			case <-time.After(time.Second):
			}
			return 3, nil
		}), 0)
		intNode(cp, "sink", &sink, nil).Depend(ns, true)
		// opt fails, and its callback panics, on the first attempt only:
		// the parked job's error names both.
		opt := asynctool.NewWrapper("opt", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if job.Attempt == 1 {
				return 0, errors.New("opt is down")
			}
			return 4, nil
		}), 0).Callback(asynctool.ResultFunc[int, int](func(bool, int, asynctool.WorkResult[int]) {
			if job.Attempt == 1 {
				panic("opt's callback")
			}
		}))
		// late times out on the first attempt: the parked job's error
		// names it among the failed nodes too.
		late := asynctool.NewWrapper("late", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			if job.Attempt == 1 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 5, nil
		}), 0).Timeout(20 * time.Millisecond)
		return []asynctool.Wrapper{na, nside, opt, late}, nil
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, build))
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	defer cancel()
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)

	ev := waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "a suspended graph parks its job")
	require.NotEmpty(t, ev.Job.Errors)
	msg := ev.Job.Errors[len(ev.Job.Errors)-1].Error
	assert.Contains(t, msg, `suspended at "s" (waiting for a manual review); failed: "opt" (opt is down), "late" (asynctool: node "late" exceeded its timeout of 20ms); run: asynctool: callback Result of node "opt" panicked: opt's callback`)
	assert.Equal(t, int32(1), side.Load())
	assert.Equal(t, int32(0), sink.Load())

	approved.Store(true)
	_, err = client.JobRetry(context.Background(), res.Job.ID)
	require.NoError(t, err)
	ev = waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCompleted, ev.Kind)
	assert.Equal(t, int32(1), a.Load(), "a was replayed")
	assert.Equal(t, int32(1), side.Load(), "side was replayed")
	assert.Equal(t, int32(2), s.Load(), "s ran again")
	assert.Equal(t, int32(1), sink.Load())
}

// TestSuspendedErrorNamesItsNodes checks the error's text and Unwrap.
func TestSuspendedErrorNamesItsNodes(t *testing.T) {
	cause := errors.New("needs review")
	down := errors.New("down")
	panicked := errors.New("panicked")
	err := error(&SuspendedError{
		Suspended: []NodeFailure{
			{ID: "x", Status: asynctool.StatusPending, Err: cause},
			{ID: "y", Status: asynctool.StatusPending},
			{Index: 3, Status: asynctool.StatusPending},
		},
		Failed: []NodeFailure{{ID: "z", Status: asynctool.StatusFailed, Err: down}},
		RunErr: panicked,
	})
	assert.Equal(t, `durable: the graph suspended at "x" (needs review), "y", #3; failed: "z" (down); run: panicked; resume the job with durable.Resume`, err.Error())
	assert.ErrorIs(t, err, cause)
	assert.NotErrorIs(t, err, down, "a failed node's error could be a snooze, which River would obey")
	assert.ErrorIs(t, err, panicked)
	var se *SuspendedError
	assert.ErrorAs(t, river.JobCancel(err), &se, "the Worker's JobCancel keeps it reachable")
}

// TestAttemptErrorsKeepTheirErrorsInJSON: an attempt's errors, encoded
// as JSON (to be logged), keep their nodes' errors and the run's, as
// asynctool.Report does: each as an asynctool.StoredError, its message
// and the sentinels it matched, and null if nil. encoding/json alone
// wrote {} for each.
func TestAttemptErrorsKeepTheirErrorsInJSON(t *testing.T) {
	failed := NodeFailure{ID: "b", Index: 1, Status: asynctool.StatusFailed, Err: fmt.Errorf("fetch: %w", context.DeadlineExceeded)}
	pending := NodeFailure{ID: "s", Index: 2, Status: asynctool.StatusPending}
	failedJSON := fmt.Sprintf(`{"ID":"b","Index":1,"Status":%d,"Err":{"Text":"fetch: context deadline exceeded","Matches":["context.DeadlineExceeded"]}}`, asynctool.StatusFailed)
	pendingJSON := fmt.Sprintf(`{"ID":"s","Index":2,"Status":%d,"Err":null}`, asynctool.StatusPending)
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"NodeFailure", failed, failedJSON},
		{"NodeFailure without an error", pending, pendingJSON},
		{"GraphFailedError", &GraphFailedError{Failed: []NodeFailure{failed}, RunErr: errors.New("run cancelled")},
			`{"Failed":[` + failedJSON + `],"RunErr":{"Text":"run cancelled"}}`},
		{"GraphFailedError without a run error", &GraphFailedError{Failed: []NodeFailure{failed}},
			`{"Failed":[` + failedJSON + `],"RunErr":null}`},
		{"SuspendedError", &SuspendedError{Suspended: []NodeFailure{pending}, Failed: []NodeFailure{failed}, RunErr: errors.New("callback panicked")},
			`{"Suspended":[` + pendingJSON + `],"Failed":[` + failedJSON + `],"RunErr":{"Text":"callback panicked"}}`},
		{"SuspendedError without a run error", &SuspendedError{Suspended: []NodeFailure{failed}},
			`{"Suspended":[` + failedJSON + `],"Failed":null,"RunErr":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			require.NoError(t, err)
			assert.JSONEq(t, tc.want, string(b))
		})
	}
}

// TestSuspensionOutranksASnooze runs a graph where a tolerated node
// (PolicyContinue) returns river.JobSnooze while another suspends: the
// job is parked, not snoozed, since a snooze would run the suspended node
// again with nobody having looked at it.
func TestSuspensionOutranksASnooze(t *testing.T) {
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		z := asynctool.NewWrapper("z", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, river.JobSnooze(time.Hour)
		}), 0).OnFailure(asynctool.PolicyContinue)
		s := asynctool.NewWrapper("s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("needs approval")
		}), 0).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{z, s}, nil
	}))
	client := newClient[*sql.Tx](t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCancelled, river.EventKindJobSnoozed, river.EventKindJobFailed, river.EventKindJobCompleted)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCancelled, ev.Kind)
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, `suspended at "s" (needs approval); failed: "z"`)
}

// TestSuccessRule checks the rest of Work's success rule, one case each:
// a failed node under PolicyContinue that is not a sink is tolerated; a
// PolicyEnd that ends the run, and a panicking callback, fail the attempt
// although every sink succeeded; a snooze from a tolerated node snoozes
// the job (its node runs twice in one allowed attempt, with no failed
// attempt between).
func TestSuccessRule(t *testing.T) {
	work := func(runs *atomic.Int32, err func(n int32) error) asynctool.Worker[int, int] {
		return asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 1, err(runs.Add(1))
		})
	}
	never := func(int32) error { return nil }
	boom := errors.New("boom")
	always := func(int32) error { return boom }
	for _, tc := range []struct {
		name  string
		build func(runs *atomic.Int32) []asynctool.Wrapper
		want  rivertype.JobState
		runs  int32
	}{
		{"PolicyContinue on a node that is not a sink", func(runs *atomic.Int32) []asynctool.Wrapper {
			a := asynctool.NewWrapper("a", work(runs, always), 0).OnFailure(asynctool.PolicyContinue)
			asynctool.NewWrapper("sink", work(new(atomic.Int32), never), 0).Depend(a, true)
			return []asynctool.Wrapper{a}
		}, rivertype.JobStateCompleted, 1},
		{"PolicyEnd after the sink succeeded", func(runs *atomic.Int32) []asynctool.Wrapper {
			sinkDone := make(chan struct{})
			end := asynctool.NewWrapper("end", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				runs.Add(1)
				<-sinkDone
				return 0, boom
			}), 0).OnFailure(asynctool.PolicyEnd).ShortCircuit(false) // runs although the sink goes on without it
			b := asynctool.NewWrapper("b", work(new(atomic.Int32), never), 0)
			asynctool.NewWrapper("sink", work(new(atomic.Int32), never), 0).Depend(b, true).Depend(end, false).
				Callback(asynctool.ResultFunc[int, int](func(bool, int, asynctool.WorkResult[int]) { close(sinkDone) }))
			return []asynctool.Wrapper{b, end}
		}, rivertype.JobStateDiscarded, 1},
		{"a callback panics", func(runs *atomic.Int32) []asynctool.Wrapper {
			return []asynctool.Wrapper{asynctool.NewWrapper("sink", work(runs, never), 0).
				Callback(asynctool.ResultFunc[int, int](func(bool, int, asynctool.WorkResult[int]) { panic("callback") }))}
		}, rivertype.JobStateDiscarded, 1},
		{"a tolerated node snoozes", func(runs *atomic.Int32) []asynctool.Wrapper {
			bad := asynctool.NewWrapper("bad", work(runs, func(n int32) error {
				if n == 1 {
					return river.JobSnooze(time.Millisecond)
				}
				return nil
			}), 0).ShortCircuit(false) // an optional start node is skipped if the sink runs before it starts
			ok := asynctool.NewWrapper("ok", work(new(atomic.Int32), never), 0)
			asynctool.NewWrapper("sink", work(new(atomic.Int32), never), 0).Depend(ok, true).Depend(bad, false)
			return []asynctool.Wrapper{bad, ok}
		}, rivertype.JobStateCompleted, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			evs := runJob(t, 1, 10*time.Second, func(context.Context, *river.Job[sumArgs], *Checkpoint) ([]asynctool.Wrapper, error) {
				return tc.build(&runs), nil
			})
			require.Len(t, evs, 1)
			assert.Equal(t, tc.want, evs[0].Job.State)
			assert.Equal(t, tc.runs, runs.Load())
		})
	}
}

// TestNilWorkerFailsTheJobBeforeAnyNodeRuns checks, through River,
// that the attempt of a graph with a checkpointed node that cannot run
// fails before any node runs, its error, stored in the job's row, saying
// why: a nil worker (naming the node), or the empty id, where such a
// node failed only when its turn came, after the nodes before it.
func TestNilWorkerFailsTheJobBeforeAnyNodeRuns(t *testing.T) {
	for want, node := range map[string]func(cp *Checkpoint, o asynctool.Wrapper){
		`nil worker: node "n"`: func(cp *Checkpoint, o asynctool.Wrapper) {
			var f asynctool.WorkerFunc[int, int]
			Node(cp, "n", f, 0).Depend(o, true)
		},
		"a checkpointed node (Node) needs an id": func(cp *Checkpoint, o asynctool.Wrapper) {
			var runs atomic.Int32
			intNode(cp, "", &runs, nil).Depend(o, true)
		},
	} {
		var other atomic.Int32
		evs := runJob(t, 1, 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			o := intNode(cp, "other", &other, nil)
			node(cp, o)
			return []asynctool.Wrapper{o}, nil
		})
		require.Len(t, evs, 1, want)
		require.Len(t, evs[0].Job.Errors, 1, want)
		assert.Contains(t, evs[0].Job.Errors[0].Error, want)
		assert.Zero(t, other.Load(), want)
	}
}

// TestRefusedWorkersAreGraphErrors checks that a checkpointed node
// whose worker asynctool refuses before a run (nil; and as ForEach's and
// Hedged's docs say, ErrNilWorker, ErrBadLimit) is refused the same way in a
// durable graph: before any node runs, with a *asynctool.GraphError.
// Wrapped by Node, such a worker was hidden from asynctool's checks,
// and the node failed only when it ran, after the rest of the graph.
func TestRefusedWorkersAreGraphErrors(t *testing.T) {
	items := func(context.Context, int, asynctool.Wrappers) ([]int, error) { return []int{1}, nil }
	each := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil })
	var nilFunc asynctool.WorkerFunc[int, int]
	for name, tc := range map[string]struct {
		make func(cp *Checkpoint) asynctool.Wrapper
		want error
	}{
		// Before, a nil Worker failed only when the node ran, and a nil
		// WorkerFunc panicked with a nil dereference that named nothing.
		"nil Worker": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node[int, int](cp, "n", nil, 0)
		}, asynctool.ErrNilWorker},
		"nil WorkerFunc": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node(cp, "n", asynctool.Worker[int, int](nilFunc), 0)
		}, asynctool.ErrNilWorker},
		"ForEach without a Worker": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node[int, []asynctool.WorkResult[int]](cp, "n", asynctool.ForEach[int, int, int]{Items: items}, 0)
		}, asynctool.ErrNilWorker},
		"ForEach with a negative Limit": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node[int, []asynctool.WorkResult[int]](cp, "n", asynctool.ForEach[int, int, int]{Items: items, Worker: each, Limit: -1}, 0)
		}, asynctool.ErrBadLimit},
		"Hedged of nil": {func(cp *Checkpoint) asynctool.Wrapper {
			return Node(cp, "n", asynctool.Hedged[int, int](nil, time.Millisecond, 2), 0)
		}, asynctool.ErrNilWorker},
	} {
		t.Run(name, func(t *testing.T) {
			var other atomic.Int32
			cp := newCheckpoint(nil)
			o := intNode(cp, "other", &other, nil)
			n := tc.make(cp)
			// n after o, so that o would run first if the run started.
			switch n := n.(type) {
			case *asynctool.WorkerWrapper[int, int]:
				n.Depend(o, true)
			case *asynctool.WorkerWrapper[int, []asynctool.WorkResult[int]]:
				n.Depend(o, true)
			}
			err := newAsync(t).BeginWork(context.Background(), time.Second, o)
			var ge *asynctool.GraphError
			require.ErrorAs(t, err, &ge)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorContains(t, err, `"n"`)
			assert.Zero(t, other.Load(), "no node runs")
		})
	}
}

// suspendingOn builds a → s, s checkpointed under PolicySuspend, whose
// worker fails with first(n) on its nth run (n from 1) and succeeds once
// first returns nil.
func suspendingOn(s *atomic.Int32, first func(n int32) error) BuildFunc[sumArgs] {
	var a atomic.Int32
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &a, nil)
		Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 1, first(s.Add(1))
		}), 0).Depend(na, true).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{na}, nil
	}
}

// TestSuspendedNodeSnoozeStillParks guards the package doc's rule that a
// suspension outranks a snooze when the snooze comes from the suspended
// node itself: SuspendedError must not unwrap to its JobSnoozeError, or
// River, which looks for a snooze before a cancellation, snoozes the job
// and the suspended node runs again with nobody having looked at it.
func TestSuspendedNodeSnoozeStillParks(t *testing.T) {
	var s atomic.Int32
	build := suspendingOn(&s, func(n int32) error {
		if n == 1 {
			return river.JobSnooze(time.Millisecond)
		}
		return nil
	})
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, build))
	client := newClient(t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind, "the suspension parks the job")
	time.Sleep(500 * time.Millisecond) // a snoozed job would have run again by now
	assert.Equal(t, int32(1), s.Load(), "nobody resumed the job: s must not run again")
}

// TestSuspendedNodeCancelIsNotParked guards the package doc's rule that a
// river.JobCancel outranks the suspension even when the suspended node
// itself returned it: the job is cancelled, not parked, so Resume
// refuses it.
func TestSuspendedNodeCancelIsNotParked(t *testing.T) {
	var s atomic.Int32
	client, id, _ := runParked(t, suspendingOn(&s, func(int32) error {
		return river.JobCancel(errors.New("order withdrawn"))
	}))
	row, err := client.JobGet(context.Background(), id)
	require.NoError(t, err)
	assert.Contains(t, row.Errors[len(row.Errors)-1].Error, "order withdrawn")
	assert.NotContains(t, row.Errors[len(row.Errors)-1].Error, "suspended", "not a park")
	_, err = Resume(context.Background(), client, id, nil)
	assert.ErrorIs(t, err, ErrNotParked, "the job was cancelled by a node, not parked")
}

// TestJobRetryThenCancelIsNotParked guards Resume's rule that a job is
// parked only if its last attempt parked it: after a Client.JobRetry of a
// parked job, an attempt whose BuildFunc cancels the job stores no
// checkpoint, so the row keeps the park mark of the attempt before; the
// mark names its attempt, and Resume refuses the job.
func TestJobRetryThenCancelIsNotParked(t *testing.T) {
	var s atomic.Int32
	var approved, cancelled atomic.Bool
	inner := gatedApproval(&s, &approved, func(int32) error { return nil })
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		if cancelled.Load() {
			return nil, river.JobCancel(errors.New("order deleted"))
		}
		return inner(ctx, job, cp)
	})
	cancelled.Store(true)
	_, err := client.JobRetry(context.Background(), id)
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind)
	require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, "order deleted")
	_, err = Resume(context.Background(), client, id, nil)
	assert.ErrorIs(t, err, ErrNotParked, "the last attempt cancelled the job for another reason")
	assert.ErrorContains(t, err, "attempt 1's, not its last attempt's (2)", "the error says whose the mark is")
}

// TestSuspendedSnoozeAndACancelElsewhere: a suspended node's snooze must
// not override another node's river.JobCancel: the job is cancelled, and
// the suspended node does not run again (the GraphFailedError carried
// the snooze, which River obeys first).
func TestSuspendedSnoozeAndACancelElsewhere(t *testing.T) {
	var s atomic.Int32
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		x := asynctool.NewWrapper("x", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, river.JobCancel(errors.New("order withdrawn"))
		}), 0)
		ns := Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			s.Add(1)
			return 0, river.JobSnooze(time.Millisecond)
		}), 0).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{x, ns}, nil
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, build))
	client := newClient(t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind, "x's JobCancel must cancel the job")
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, int32(1), s.Load(), "s must not run again")
}

// slowInt is an int whose first decoding takes a while, standing for a
// deadline that passes between the stall and await's replay.
type slowInt struct{ V int }

var slowDecodes atomic.Int32

func (s *slowInt) UnmarshalJSON(b []byte) error {
	if slowDecodes.Add(1) == 1 {
		time.Sleep(600 * time.Millisecond)
	}
	return json.Unmarshal(b, &s.V)
}

func (s slowInt) MarshalJSON() ([]byte, error) { return json.Marshal(s.V) }

// TestDeadlineDuringReplayDoesNotPark: when the group deadline passes
// while an attempt replays a decided value into a node its custom join
// suspended, the attempt fails (River retries it) rather than parking the
// job again, as a person already decided the node.
func TestDeadlineDuringReplayDoesNotPark(t *testing.T) {
	slowDecodes.Store(0)
	var got atomic.Int64
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		up := asynctool.NewWrapper("up", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("down")
		}), 0)
		nc := Node(cp, "c", asynctool.WorkerFunc[int, slowInt](func(context.Context, int, asynctool.Wrappers) (slowInt, error) {
			return slowInt{1}, nil
		}), 0).Depend(up, true).Join(asynctool.CustomJoin(func(ups []asynctool.Upstream) asynctool.Decision {
			if !ups[0].OK {
				return asynctool.DecideSuspend
			}
			return asynctool.DecideRun
		}))
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[slowInt](all, "c")
			got.Store(int64(r.Value.V))
			return r.Value.V, err
		}), 0).Depend(nc, true)
		return []asynctool.Wrapper{up}, nil
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 200*time.Millisecond, build))
	client := newClient(t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed)
	defer cancel()
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCancelled, waitFor(t, events, 1)[0].Kind, "parked on c")
	_, err = Resume(context.Background(), client, res.Job.ID, map[string]any{"c": 5})
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	if !assert.Equal(t, river.EventKindJobCompleted, ev.Kind, "c was decided; the deadline must retry, not park") {
		t.Logf("last error: %s", ev.Job.Errors[len(ev.Job.Errors)-1].Error)
	}
}

// TestCancelOutranksASnoozeElsewhere is
// TestSuspendedSnoozeAndACancelElsewhere without the suspension: one
// node asks River to cancel the job, another to snooze it. River obeys a
// snooze anywhere in the error before it looks for a cancellation, so
// the GraphFailedError must not carry the snooze beside the cancellation:
// it did, and the job was snoozed on every attempt, x's JobCancel never
// obeyed, s running again each time (a snooze consumes no attempt, so
// for ever).
func TestCancelOutranksASnoozeElsewhere(t *testing.T) {
	var s atomic.Int32
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		x := asynctool.NewWrapper("x", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, river.JobCancel(errors.New("order withdrawn"))
		}), 0)
		ns := Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			s.Add(1)
			return 0, fmt.Errorf("stock service busy: %w", river.JobSnooze(time.Millisecond))
		}), 0)
		return []asynctool.Wrapper{x, ns}, nil
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, build))
	client := newClient(t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	assert.Equal(t, river.EventKindJobCancelled, ev.Kind, "x's JobCancel must cancel the job")
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, int32(1), s.Load(), "s must not run again")
}

// TestGraphFailedErrorUnwrapLeavesOutSnoozes: a GraphFailedError leaves out the nodes'
// snoozes only when a node asked for a cancellation.
func TestGraphFailedErrorUnwrapLeavesOutSnoozes(t *testing.T) {
	snooze := river.JobSnooze(time.Second)
	cancelErr := river.JobCancel(errors.New("withdrawn"))
	var snoozeErr *rivertype.JobSnoozeError
	e := &GraphFailedError{Failed: []NodeFailure{{ID: "s", Err: snooze}}}
	assert.ErrorAs(t, e, &snoozeErr, "a snooze alone reaches River")
	e.Failed = append(e.Failed, NodeFailure{ID: "x", Err: cancelErr})
	assert.False(t, errors.As(e, &snoozeErr), "a cancellation outranks it")
	assert.ErrorIs(t, e, cancelErr)
	assert.Contains(t, e.Error(), "JobSnoozeError", "the text still names every node's error")
}

// TestGraphFailedErrorUnwrapOneErrorAskingBoth checks a node error that
// asks River both to cancel and to snooze the job (errors.Join of the
// two): it used to be left out of Unwrap whole, so that River saw
// neither and retried the job as an ordinary failure; its cancellation
// now reaches River, and its snooze does not.
func TestGraphFailedErrorUnwrapOneErrorAskingBoth(t *testing.T) {
	both := errors.Join(river.JobCancel(errors.New("withdrawn")), river.JobSnooze(time.Second))
	e := &GraphFailedError{Failed: []NodeFailure{{ID: "x", Err: both}}}
	var cancelErr *rivertype.JobCancelError
	var snoozeErr *rivertype.JobSnoozeError
	assert.ErrorAs(t, e, &cancelErr, "the cancellation reaches River")
	assert.False(t, errors.As(e, &snoozeErr), "the snooze does not")
}

// shortRiverTimeout is a Worker whose River job timeout is 100ms, whatever
// the graph's deadline.
type shortRiverTimeout struct{ *Worker[sumArgs] }

func (shortRiverTimeout) Timeout(*river.Job[sumArgs]) time.Duration { return 100 * time.Millisecond }

// TestCallbackPanicSurvivesRiversTimeout guards the attempt's error
// when River's ctx ends while the run is still ending: the run's error,
// with the callback panic in it, must be waited for, not replaced by
// ctx.Err(). Here a node suspends, the attempt cancels the run to park
// the job, and the node's OnNodeEnd hook, called as the cancellation ends
// the node, outlasts River's timeout and then panics. Run.Wait(ctx)
// returned ctx.Err() at once, and the attempt failed without the panic.
func TestCallbackPanicSurvivesRiversTimeout(t *testing.T) {
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

// TestWorkOutsideRiver pins what Work's doc says of a unit test of a
// Worker: Work called directly, outside a job River runs, panics with
// River's own message (the checkpoint is a River resumable step, which
// needs River's state in ctx), while rivertest.Worker runs it as a
// client would, checkpoints included.
func TestWorkOutsideRiver(t *testing.T) {
	cnt := &counters{}
	worker := mustWorker(t, newAsync(t), time.Minute, sumGraph(cnt))
	job := &river.Job[sumArgs]{JobRow: &rivertype.JobRow{}, Args: sumArgs{Base: 2}}
	assert.PanicsWithError(t, "river: resumable step can only be used within a Worker", func() {
		_ = worker.Work(context.Background(), job)
	})
	assert.Zero(t, cnt.a.Load(), "no node ran")

	db := openSQLite(t)
	tw := rivertest.NewWorker(t, riversqlite.New(db), &river.Config{}, worker)
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	cnt.failB.Store(1)
	res, err := tw.Work(t.Context(), t, tx, sumArgs{Base: 2}, nil)
	require.Error(t, err, "b fails the first attempt")
	assert.Equal(t, river.EventKindJobFailed, res.EventKind)
	res, err = tw.WorkJob(t.Context(), t, tx, res.Job)
	require.NoError(t, err)
	assert.Equal(t, river.EventKindJobCompleted, res.EventKind)
	assert.Equal(t, int32(1), cnt.a.Load(), "the retry replays a")
	assert.Equal(t, int64(23), cnt.total.Load())
}

// TestSeveralClientsShareOneSQLiteFile is TestSeveralMachinesShareJobs
// without a server: three River clients, each with its own connection to
// one SQLite file and its own Async, claim the jobs of one table, as the
// seed's machines claim rows with an UPDATE used as a compare-and-swap.
// Every attempt is claimed by one client only, and a retry on any of
// them replays what another checkpointed.
func TestSeveralClientsShareOneSQLiteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "river.db")
	l := newLedger()
	var clients []*river.Client[*sql.Tx]
	for k := range 3 {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)")
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		if k == 0 {
			mig, err := rivermigrate.New(riversqlite.New(db), nil)
			require.NoError(t, err)
			_, err = mig.Migrate(context.Background(), rivermigrate.DirectionUp, nil)
			require.NoError(t, err)
		}
		clients = append(clients, newClient[*sql.Tx](t, riversqlite.New(db), l.workers(t, k)))
	}
	shareJobs(t, l, clients)
}

// rescue is what the tests of a dead client's (or machine's) job share:
// workers for a sumArgs job, whose node a the dead client checkpointed
// at 41 and whose node b adds one, and for a longArgs job, whose graph
// may run for three hours; and the counts of a's and b's calls and b's
// result.
type rescue struct {
	a, b atomic.Int32
	got  atomic.Int64
}

func (c *rescue) workers(t *testing.T) *river.Workers {
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &c.a, nil)
		Node(cp, "b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			c.b.Add(1)
			r, err := asynctool.ResultOf[int](all, "a")
			c.got.Store(int64(r.Value + 1))
			return r.Value + 1, err
		}), 0).Depend(na, true)
		return []asynctool.Wrapper{na}, nil
	}))
	river.AddWorker(workers, mustWorker(t, newAsync(t), 3*time.Hour, func(ctx context.Context, job *river.Job[longArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{intNode(cp, "a", new(atomic.Int32), nil)}, nil
	}))
	return workers
}

// check checks ev, the first end of a job, to be the sumArgs job quick
// completed by its second attempt, the one River's rescue made, which
// replayed a.
func (c *rescue) check(t *testing.T, ev *river.Event, quick int64) {
	t.Helper()
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	require.Equal(t, quick, ev.Job.ID)
	assert.Equal(t, 2, ev.Job.Attempt)
	require.Len(t, ev.Job.Errors, 1)
	assert.Contains(t, ev.Job.Errors[0].Error, "Stuck job rescued")
	assert.Zero(t, c.a.Load(), "a was replayed from the checkpoint the dead client saved")
	assert.Equal(t, int32(1), c.b.Load())
	assert.Equal(t, int64(42), c.got.Load())
}

// TestDeadClientsJobIsRescuedOnSQLite is TestDeadMachinesJobIsRescued on
// one SQLite file: the row a client left when its process died (running
// for two hours, attempted by it, with the checkpoint its SaveEach stored)
// is rescued by another client with its own connection to the file,
// which replays a instead of running it; a job of the same age whose
// graph may run for three hours is left running.
func TestDeadClientsJobIsRescuedOnSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "river.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)")
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		return db
	}
	dead := open()
	mig, err := rivermigrate.New(riversqlite.New(dead), nil)
	require.NoError(t, err)
	_, err = mig.Migrate(context.Background(), rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	ctx := context.Background()
	insertOnly, err := river.NewClient[*sql.Tx](riversqlite.New(dead), &river.Config{})
	require.NoError(t, err)
	quick, err := insertOnly.Insert(ctx, sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	long, err := insertOnly.Insert(ctx, longArgs{}, nil)
	require.NoError(t, err)
	// River's SQLite times are UTC text in this format, which is what
	// strftime writes.
	checkpoint := `{"river:resumable_step": "asynctool-graph", "river:resumable_cursor": {"asynctool-graph": {"a": 41}}}`
	for _, id := range []int64{quick.Job.ID, long.Job.ID} {
		_, err = dead.Exec(`UPDATE river_job SET state = 'running', attempt = 1,
			attempted_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-2 hours'),
			attempted_by = jsonb('["dead-client"]'), metadata = jsonb(?) WHERE id = ?`, checkpoint, id)
		require.NoError(t, err)
	}

	var c rescue
	workers := c.workers(t)
	client := testClient(t, riversqlite.New(open()), &river.Config{RescueStuckJobsAfter: time.Hour, RetryPolicy: retryNow{}, Workers: workers})
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	t.Cleanup(cancel)
	startClient(t, client)
	c.check(t, waitFor(t, events, 1)[0], quick.Job.ID)

	row, err := insertOnly.JobGet(ctx, long.Job.ID)
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateRunning, row.State, "rescued only after its graph's three hours")
}
