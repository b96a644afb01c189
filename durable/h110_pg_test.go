package durable

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH110CleanerDeletesAParkedJob: to River a parked job is a cancelled
// one, which its JobCleaner (run by whichever client of the database is
// the leader) deletes once the client's CancelledJobRetentionPeriod, 24
// hours by default, has passed since the job was finalized. A job parked
// over a weekend was gone on Monday, and Resume said only "not found":
// its error now says why a parked job can vanish and what keeps it.
func TestH110CleanerDeletesAParkedJob(t *testing.T) {
	pool, schema, _, id := parkedOnly(t)
	_, err := pool.Exec(context.Background(), "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET finalized_at = now() - interval '25 hours' WHERE id = $1", id)
	require.NoError(t, err)
	// A machine starts with River's defaults and becomes the leader.
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{intNode(cp, "s", new(atomic.Int32), nil)}, nil
	}))
	client := newClientIn[pgx.Tx](t, riverpgxv5.New(pool), schema, workers, retryNow{})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := client.JobGet(context.Background(), id)
		if errors.Is(err, rivertype.ErrNotFound) {
			break
		}
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "the cleaner did not delete the parked job in 30 s")
		time.Sleep(50 * time.Millisecond)
	}
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 1})
	require.ErrorIs(t, err, rivertype.ErrNotFound)
	assert.Contains(t, err.Error(), "CancelledJobRetentionPeriod", "the error says why a parked job can be gone")
}

// h110LongArgs is a job whose Worker has a long timeout.
type h110LongArgs struct{}

func (h110LongArgs) Kind() string { return "durable_test_h110_long" }

// TestH110DeadMachinesJobIsRescued leaves in the database what a machine
// that died mid-run leaves: a job running for two hours on a machine
// that no longer works it, with the checkpoint its SaveEach stored (a
// succeeded) in its row. Another machine's River rescues it, as stuck,
// and retries it from that checkpoint: a's worker does not run, b's
// does. River rescues a job only once it has run for longer than both
// the client's RescueStuckJobsAfter and the job's timeout, which is the
// graph's plus a second: a job of the same age whose graph may run for
// three hours is left running.
func TestH110DeadMachinesJobIsRescued(t *testing.T) {
	url, schema := pgSchema(t)
	pool := newPool(t, url)
	ctx := context.Background()
	insertOnly, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	quick, err := insertOnly.Insert(ctx, sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	long, err := insertOnly.Insert(ctx, h110LongArgs{}, nil)
	require.NoError(t, err)
	checkpoint := `{"river:resumable_step": "asynctool-graph", "river:resumable_cursor": {"asynctool-graph": {"a": 41}}}`
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET state = 'running', attempt = 1, attempted_at = now() - interval '2 hours', attempted_by = '{dead-machine}', metadata = $2"+
		" WHERE id = ANY($1)", []int64{quick.Job.ID, long.Job.ID}, checkpoint)
	require.NoError(t, err)

	var a, b atomic.Int32
	var got atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &a, nil)
		Node(cp, "b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			b.Add(1)
			r, err := asynctool.ResultOf[int](all, "a")
			got.Store(int64(r.Value + 1))
			return r.Value + 1, err
		}), 0).Depend(na, true)
		return []asynctool.Wrapper{na}, nil
	}))
	river.AddWorker(workers, mustWorker(t, newAsync(t), 3*time.Hour, func(ctx context.Context, job *river.Job[h110LongArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{intNode(cp, "a", new(atomic.Int32), nil)}, nil
	}))
	events := startSubscribed(t, riverpgxv5.New(newPool(t, url)), &river.Config{Schema: schema, RescueStuckJobsAfter: time.Hour, Workers: workers})
	ev := waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	require.Equal(t, quick.Job.ID, ev.Job.ID)
	assert.Equal(t, 2, ev.Job.Attempt)
	require.Len(t, ev.Job.Errors, 1)
	assert.Contains(t, ev.Job.Errors[0].Error, "Stuck job rescued")
	assert.Zero(t, a.Load(), "a was replayed from the checkpoint the dead machine saved")
	assert.Equal(t, int32(1), b.Load())
	assert.Equal(t, int64(42), got.Load())

	row, err := insertOnly.JobGet(ctx, long.Job.ID)
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateRunning, row.State, "rescued only after its graph's three hours")
}

// TestH110StoppedMachinesJobGoesOnElsewhere stops machine m0's River
// client with StopAndCancel while its attempt of a job runs b, after a
// succeeded: the attempt, cancelled, stores the checkpoint without
// SaveEach, and River makes the job available again without counting the
// attempt. Machine m1 takes it and replays a.
func TestH110StoppedMachinesJobGoesOnElsewhere(t *testing.T) {
	url, schema := pgSchema(t)
	var a, b atomic.Int32
	bStarted := make(chan struct{}, 1)
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &a, nil)
		Node(cp, "b", asynctool.WorkerFunc[int, int](func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
			if b.Add(1) == 1 {
				bStarted <- struct{}{}
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 2, nil
		}), 0).Depend(na, true)
		return []asynctool.Wrapper{na}, nil
	}
	workers0 := river.NewWorkers()
	river.AddWorker(workers0, mustWorker(t, newAsync(t), 30*time.Second, build))
	m0 := newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, workers0, retryNow{})
	res, err := m0.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	select {
	case <-bStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("b did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m0.StopAndCancel(ctx))
	row, err := m0.JobGet(context.Background(), res.Job.ID)
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateAvailable, row.State)
	assert.Zero(t, row.Attempt, "the cancelled attempt is not counted")
	assert.Contains(t, string(row.Metadata), `{"asynctool-graph": {"a": 1}}`, "the checkpoint is stored")

	workers1 := river.NewWorkers()
	river.AddWorker(workers1, mustWorker(t, newAsync(t), 30*time.Second, build))
	events := startSubscribed(t, riverpgxv5.New(newPool(t, url)), &river.Config{Schema: schema, Workers: workers1})
	ev := waitFor(t, events, 1)[0]
	assert.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.Equal(t, int32(1), a.Load(), "a was replayed on m1")
	assert.Equal(t, int32(2), b.Load())
}

// startSubscribed starts a River client with config (completed with the
// settings newClientIn uses), stopped when t ends, and returns its
// completed and failed jobs' events, subscribed before it starts, so
// that none is missed.
func startSubscribed(t *testing.T, driver *riverpgxv5.Driver, config *river.Config) <-chan *river.Event {
	t.Helper()
	config.Logger = slog.New(slog.DiscardHandler)
	config.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}
	config.FetchCooldown = 5 * time.Millisecond
	config.FetchPollInterval = 20 * time.Millisecond
	config.RetryPolicy = retryNow{}
	client, err := river.NewClient[pgx.Tx](driver, config)
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	t.Cleanup(cancel)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return events
}

// TestH110UniqueJobParked: to River a parked job is a cancelled one,
// and River's default unique states leave cancelled jobs out, so a
// unique job frees its unique key when it parks: a job with the same
// args can be inserted and run meanwhile, and then Resume cannot make
// the parked one available again. Resume's error was PostgreSQL's
// unique violation alone; it now says why, and what keeps the key:
// JobStateCancelled in UniqueOpts.ByState, with which the duplicate is
// not inserted.
func TestH110UniqueJobParked(t *testing.T) {
	run := func(t *testing.T, opts *river.InsertOpts) (*river.Client[pgx.Tx], int64, *rivertype.JobInsertResult, <-chan *river.Event) {
		j := parkedApproval(t, opts)
		j.approved.Store(true)
		dup, err := j.client.Insert(context.Background(), sumArgs{Base: 1}, opts)
		require.NoError(t, err)
		return j.client, j.id, dup, j.events
	}
	t.Run("default unique states", func(t *testing.T) {
		client, id, dup, events := run(t, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
		require.False(t, dup.UniqueSkippedAsDuplicate, "the parked job no longer holds its unique key")
		ev := waitFor(t, events, 1)[0]
		require.Equal(t, river.EventKindJobCompleted, ev.Kind)
		require.Equal(t, dup.Job.ID, ev.Job.ID)
		_, err := Resume(context.Background(), client, id, map[string]any{"s": 42})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "UniqueOpts.ByState", "the error says why, and what keeps the key")
	})
	t.Run("cancelled among the unique states", func(t *testing.T) {
		client, id, dup, events := run(t, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true,
			ByState: append(rivertype.UniqueOptsByStateDefault(), rivertype.JobStateCancelled)}})
		require.True(t, dup.UniqueSkippedAsDuplicate, "the parked job holds its unique key")
		require.Equal(t, id, dup.Job.ID)
		_, err := Resume(context.Background(), client, id, map[string]any{"s": 42})
		require.NoError(t, err)
		assert.Equal(t, river.EventKindJobCompleted, waitFor(t, events, 1)[0].Kind)
	})
}

// TestH110RawMessageComesBackAsJSONBWritesIt: PostgreSQL stores the
// checkpoint as jsonb, which keeps the JSON value, not its bytes: a
// json.RawMessage result replays on PostgreSQL with its keys in jsonb's
// order, its duplicate keys dropped (the last kept), a space after each
// colon and comma, and no escape where none is needed; on SQLite, as
// encoding/json wrote it (compacted, "<" escaped as \u003c).
func TestH110RawMessageComesBackAsJSONBWritesIt(t *testing.T) {
	url, schema := pgSchema(t)
	var runs atomic.Int32
	replayed := make(chan string, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, json.RawMessage](func(context.Context, int, asynctool.Wrappers) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`{"zz":1e2,"a":[1.50,true],"zz":3,"h":"<"}`), nil
		}), 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[json.RawMessage](all, "a")
			if err != nil {
				return 0, err
			}
			if job.Attempt == 1 {
				return 0, errors.New("b fails the first attempt")
			}
			replayed <- string(r.Value)
			return 0, nil
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}))
	events := startSubscribed(t, riverpgxv5.New(newPool(t, url)), &river.Config{Schema: schema, Workers: workers})
	insertOnly, err := river.NewClient[pgx.Tx](riverpgxv5.New(newPool(t, url)), &river.Config{Schema: schema})
	require.NoError(t, err)
	_, err = insertOnly.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobFailed, waitFor(t, events, 1)[0].Kind)
	require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, 1)[0].Kind)
	assert.Equal(t, int32(1), runs.Load(), "a was replayed")
	assert.Equal(t, `{"a": [1.50, true], "h": "<", "zz": 3}`, <-replayed)
}

// TestH110UnstorableIDInASubGraph: the ids of checkpointed nodes that a
// SubGraph's Build makes while the run goes on escape the check made
// before any node runs (TestNodeIDsMustBeStorable), and one with a NUL
// character went into the checkpoint, which PostgreSQL refused: the job
// stayed running until River's rescuer. The node now fails with
// ErrUnstorableID, and the attempt is recorded.
func TestH110UnstorableIDInASubGraph(t *testing.T) {
	requireFailsOnPostgres(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		sub := asynctool.NewWrapper("sub", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			f := intNode(cp, "fetch\x00", new(atomic.Int32), nil)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{f}, Output: func() (int, error) {
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("b is down")
		}), 0).Depend(sub, false)
		return []asynctool.Wrapper{sub}, nil
	}, ErrUnstorableID)
}
