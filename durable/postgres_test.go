package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pgEnv names the PostgreSQL database the tests of several machines use,
// as a connection URL; pgRequired, when set, makes its absence a failure
// (CI sets both, see .ci/run).
const (
	pgEnv      = "ASYNCTOOL_PG_URL"
	pgRequired = "ASYNCTOOL_REQUIRE_PG"
)

// pgSchema creates a fresh schema with River's tables in the test
// database, dropped when t ends, and returns the database's URL and the
// schema's name.
func pgSchema(t *testing.T) (string, string) {
	t.Helper()
	url := os.Getenv(pgEnv)
	if url == "" {
		if os.Getenv(pgRequired) != "" {
			t.Fatalf("%s is set but %s is empty", pgRequired, pgEnv)
		}
		t.Skipf("%s is not set: no PostgreSQL server for the tests of several machines", pgEnv)
	}
	ctx := context.Background()
	admin := newPool(t, url)
	schema := fmt.Sprintf("durable_test_%d", time.Now().UnixNano())
	_, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	mig, err := rivermigrate.New(riverpgxv5.New(admin), &rivermigrate.Config{Schema: schema})
	require.NoError(t, err)
	_, err = mig.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	return url, schema
}

// newPool returns a connection pool of its own, closed when t ends: each
// "machine" of these tests has one, as a process would.
func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// ledger records, for the jobs of a test, which machine ran what.
type ledger struct {
	mu        sync.Mutex
	runsA     map[int64]int            // job id → runs of node a's worker
	attemptsB map[int64][]string       // job id → the machine of each run of node b
	machines  map[int64]map[string]int // job id → machine → attempts built there
}

func newLedger() *ledger {
	return &ledger{runsA: map[int64]int{}, attemptsB: map[int64][]string{}, machines: map[int64]map[string]int{}}
}

// build returns machine's graph: a (checkpointed, a little slow, so that
// claims overlap) → b, which fails on a job's first attempt if failFirst
// says so.
func (l *ledger) build(machine string, failFirst func(*river.Job[sumArgs]) bool) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		l.mu.Lock()
		if l.machines[job.ID] == nil {
			l.machines[job.ID] = map[string]int{}
		}
		l.machines[job.ID][machine]++
		l.mu.Unlock()
		a := Node(cp, "a", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			l.mu.Lock()
			l.runsA[job.ID]++
			l.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			return job.Args.Base, nil
		}), 0)
		Node(cp, "b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			l.mu.Lock()
			l.attemptsB[job.ID] = append(l.attemptsB[job.ID], machine)
			first := len(l.attemptsB[job.ID]) == 1
			l.mu.Unlock()
			if first && failFirst(job) {
				return 0, fmt.Errorf("job %d: b fails its first attempt", job.ID)
			}
			r, err := asynctool.ResultOf[int](all, "a")
			return r.Value + 1, err
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}
}

// collect returns a channel of the ids of the jobs that clients report
// with kind.
func collect[TTx any](t *testing.T, clients []*river.Client[TTx], kind river.EventKind, n int) <-chan int64 {
	ids := make(chan int64, n)
	for _, c := range clients {
		evs, cancel := c.Subscribe(kind)
		t.Cleanup(cancel)
		go func() {
			for ev := range evs {
				ids <- ev.Job.ID
			}
		}()
	}
	return ids
}

// waitIDs waits for n distinct ids on ids and fails on a repeat.
func waitIDs(t *testing.T, ids <-chan int64, n int) map[int64]bool {
	t.Helper()
	got := map[int64]bool{}
	timeout := time.After(60 * time.Second)
	for len(got) < n {
		select {
		case id := <-ids:
			require.False(t, got[id], "job %d reported twice", id)
			got[id] = true
		case <-timeout:
			t.Fatalf("%d of %d jobs", len(got), n)
		}
	}
	return got
}

// TestSeveralMachinesShareJobs runs three River clients on one PostgreSQL
// database, each with its own connection pool and Async, as three
// machines would (see shareJobs).
func TestSeveralMachinesShareJobs(t *testing.T) {
	url, schema := pgSchema(t)
	l := newLedger()
	var clients []*river.Client[pgx.Tx]
	for k := range 3 {
		clients = append(clients, newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, l.workers(t, k), retryNow{}))
	}
	shareJobs(t, l, clients)
}

// workers returns the River workers of machine k, with an Async of its
// own, for the jobs of shareJobs: even jobs fail their first attempt.
func (l *ledger) workers(t *testing.T, k int) *river.Workers {
	even := func(job *river.Job[sumArgs]) bool { return job.Args.Base%2 == 0 }
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, l.build(fmt.Sprint("m", k), even)))
	return workers
}

// shareJobs inserts 30 jobs through clients, machines made with
// l.workers, and checks that every attempt was claimed by one of them: a
// job's checkpointed node a runs once, and b once per attempt, although
// half the jobs are retried, on whichever machine claims the retry.
func shareJobs[TTx any](t *testing.T, l *ledger, clients []*river.Client[TTx]) {
	t.Helper()
	const jobs = 30
	done := collect(t, clients, river.EventKindJobCompleted, jobs)
	for k := range jobs {
		_, err := clients[k%len(clients)].Insert(context.Background(), sumArgs{Base: k}, nil)
		require.NoError(t, err)
	}
	completed := waitIDs(t, done, jobs)

	l.mu.Lock()
	defer l.mu.Unlock()
	used := map[string]bool{}
	retried := 0
	for id := range completed {
		assert.Equal(t, 1, l.runsA[id], "job %d: node a ran once over all attempts and machines", id)
		n := len(l.attemptsB[id])
		assert.Contains(t, []int{1, 2}, n, "job %d: b ran once per attempt", id)
		if n == 2 {
			retried++
		}
		for m := range l.machines[id] {
			used[m] = true
		}
	}
	assert.Equal(t, jobs/2, retried, "every even job was retried once")
	t.Logf("machines that ran attempts: %d of %d", len(used), len(clients))
}

// retryLater schedules a failed job's next attempt an hour away, so that
// the machine that failed it does not take it again.
type retryLater struct{}

func (retryLater) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Hour) }

// TestRetryOnAnotherMachineReplays fails every job's first attempt on
// machine m0 and stops m0; machine m1, with its own pool and Async,
// retries them. m1 can only know a's results from the database, and it
// replays them: a runs once per job, on m0.
func TestRetryOnAnotherMachineReplays(t *testing.T) {
	url, schema := pgSchema(t)
	const jobs = 10
	l := newLedger()
	always := func(*river.Job[sumArgs]) bool { return true }

	workers0 := river.NewWorkers()
	river.AddWorker(workers0, mustWorker(t, newAsync(t), 10*time.Second, l.build("m0", always)))
	m0 := newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, workers0, retryLater{})
	failed := collect(t, []*river.Client[pgx.Tx]{m0}, river.EventKindJobFailed, jobs)
	var ids []int64
	for k := range jobs {
		res, err := m0.Insert(context.Background(), sumArgs{Base: k}, nil)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	waitIDs(t, failed, jobs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m0.Stop(ctx))

	workers1 := river.NewWorkers()
	river.AddWorker(workers1, mustWorker(t, newAsync(t), 10*time.Second, l.build("m1", always)))
	m1 := newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, workers1, retryNow{})
	done := collect(t, []*river.Client[pgx.Tx]{m1}, river.EventKindJobCompleted, jobs)
	for _, id := range ids {
		_, err := m1.JobRetry(context.Background(), id) // now, not in an hour
		require.NoError(t, err)
	}
	waitIDs(t, done, jobs)

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		assert.Equal(t, 1, l.runsA[id], "job %d: a ran once", id)
		assert.Equal(t, []string{"m0", "m1"}, l.attemptsB[id], "job %d: b failed on m0, then succeeded on m1", id)
		assert.Equal(t, map[string]int{"m0": 1, "m1": 1}, l.machines[id], "job %d", id)
	}
}

// TestResumeOnPostgres is TestResumeWithAValue on PostgreSQL, in a schema
// of its own (Resume writes the checkpoint with River's driver, whose
// JSON merge differs from SQLite's), and from a client on another
// "machine" than the one whose worker parked the job.
func TestResumeOnPostgres(t *testing.T) {
	j := parkedApproval(t, nil)

	// An operator's process: a client that works no jobs.
	operator, err := river.NewClient[pgx.Tx](riverpgxv5.New(newPool(t, j.url)), &river.Config{Schema: j.schema})
	require.NoError(t, err)
	_, err = Resume(context.Background(), operator, j.id, map[string]any{"s": 42})
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, waitFor(t, j.events, 1)[0].Kind)
	assert.Equal(t, int32(1), j.a.Load(), "a was replayed")
	assert.Equal(t, int32(1), j.s.Load(), "s was replayed with the value given")
	assert.Equal(t, int64(42), j.got.Load())
}

// approvalJob is a job of approvalGraph on PostgreSQL, in a schema of its
// own, worked by client, with the client's events and the graph's
// counters.
type approvalJob struct {
	url, schema string
	client      *river.Client[pgx.Tx]
	id          int64
	events      <-chan *river.Event
	a, s        atomic.Int32
	approved    atomic.Bool
	got         atomic.Int64
}

// parkedApproval inserts an approvalGraph job with opts and waits for it
// to park (node s suspends until approved is set).
func parkedApproval(t *testing.T, opts *river.InsertOpts) *approvalJob {
	t.Helper()
	j := &approvalJob{}
	j.url, j.schema = pgSchema(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, approvalGraph(&j.a, &j.s, &j.approved, &j.got)))
	j.client = newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, j.url)), j.schema, workers, retryNow{})
	events, cancel := j.client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	t.Cleanup(cancel)
	j.events = events
	res, err := j.client.Insert(context.Background(), sumArgs{Base: 1}, opts)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCancelled, waitFor(t, events, 1)[0].Kind, "parked")
	j.id = res.Job.ID
	return j
}

// parkedOnly makes a schema with River's tables, a pool, a client of the
// schema that works no jobs, and a job it inserted and then parked by
// hand, as a suspension of node s in a graph that checkpoints s and x
// would have.
func parkedOnly(t *testing.T) (*pgxpool.Pool, string, *river.Client[pgx.Tx], int64) {
	t.Helper()
	url, schema := pgSchema(t)
	pool := newPool(t, url)
	client, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	mark, err := json.Marshal(map[string]any{cursorKey: map[string]any{stepName: map[string]any{
		parkKey: parkMark{Suspended: []string{"s"}, Nodes: []string{"s", "x"}, Attempt: 1},
	}}})
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET state = 'cancelled', attempt = 1, finalized_at = now(), metadata = $2 WHERE id = $1", res.Job.ID, mark)
	require.NoError(t, err)
	return pool, schema, client, res.Job.ID
}

// holdRow runs query (with %s for schema's job table, $1 for id) in a
// transaction it leaves open, holding the row's lock, and returns it; it
// is rolled back when t ends unless committed.
func holdRow(t *testing.T, pool *pgxpool.Pool, query, schema string, id int64) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, fmt.Sprintf(query, pgx.Identifier{schema, "river_job"}.Sanitize()), id)
	require.NoError(t, err)
	return tx
}

// waitLockWaiters waits until n sessions of the database wait for a lock.
func waitLockWaiters(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting))
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sessions wait for a lock", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConcurrentResumesOneWins runs two Resumes of one parked job at
// once, held back by a lock on the job's row until both wait: one resumes
// the job with its value, and the other, which finds the job no longer
// parked, is refused instead of overwriting the first one's checkpoint.
func TestConcurrentResumesOneWins(t *testing.T) {
	pool, schema, client, id := parkedOnly(t)
	ctx := context.Background()
	hold := holdRow(t, pool, "SELECT 1 FROM %s WHERE id = $1 FOR UPDATE", schema, id)
	errs := make(chan error, 2)
	for _, values := range []map[string]any{{"s": 42}, {"x": 7}} {
		go func() {
			_, err := Resume(ctx, client, id, values)
			errs <- err
		}()
	}
	waitLockWaiters(t, pool, 2)
	require.NoError(t, hold.Commit(ctx))
	first, second := <-errs, <-errs
	if first != nil {
		first, second = second, first
	}
	require.NoError(t, first)
	require.ErrorIs(t, second, ErrNotParked)
	var cp map[string]json.RawMessage
	require.NoError(t, pool.QueryRow(ctx, "SELECT metadata->'river:resumable_cursor'->'asynctool-graph' FROM "+
		pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE id = $1", id).Scan(&cp))
	_, s := cp["s"]
	_, x := cp["x"]
	assert.True(t, s != x, "exactly one Resume's value is stored: %v", cp)
}

// TestResumeOfAJobClaimedMeanwhile claims a parked job (as a producer
// does after someone else's JobRetry) in
// a transaction that commits while a Resume waits for the row: Resume
// must see the job running, refuse it and write nothing.
func TestResumeOfAJobClaimedMeanwhile(t *testing.T) {
	pool, schema, client, id := parkedOnly(t)
	ctx := context.Background()
	claim := holdRow(t, pool, "UPDATE %s SET state = 'running', finalized_at = NULL, attempt = attempt + 1, attempted_at = now() WHERE id = $1", schema, id)
	errc := make(chan error, 1)
	go func() {
		_, err := Resume(ctx, client, id, map[string]any{"s": 42})
		errc <- err
	}()
	waitLockWaiters(t, pool, 1)
	require.NoError(t, claim.Commit(ctx))
	require.ErrorIs(t, <-errc, ErrJobRunning)
	var cp map[string]json.RawMessage
	require.NoError(t, pool.QueryRow(ctx, "SELECT metadata->'river:resumable_cursor'->'asynctool-graph' FROM "+
		pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE id = $1", id).Scan(&cp))
	assert.NotContains(t, cp, "s", "the refused Resume wrote nothing")
}

// TestCleanerDeletesAParkedJob: to River a parked job is a cancelled
// one, which its JobCleaner (run by whichever client of the database is
// the leader) deletes once the client's CancelledJobRetentionPeriod, 24
// hours by default, has passed since the job was finalized. A job parked
// over a weekend was gone on Monday, and Resume said only "not found":
// its error now says why a parked job can vanish and what keeps it.
func TestCleanerDeletesAParkedJob(t *testing.T) {
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

// TestCleanerDeletesAJobResumedAsItDeletes: River's JobCleaner picks the
// parked jobs whose retention has passed and deletes them by id, without
// locking them first. A Resume that holds the job's row when the
// cleaner's DELETE reaches it makes the job available and returns it,
// and the DELETE, which waited for the row, deletes it all the same: the
// Resume is lost, as the package's doc and Resume's say. The row's lock
// holds both back until they wait, Resume first.
func TestCleanerDeletesAJobResumedAsItDeletes(t *testing.T) {
	pool, schema, client, id := parkedOnly(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET finalized_at = now() - interval '25 hours' WHERE id = $1", id)
	require.NoError(t, err)
	hold := holdRow(t, pool, "SELECT 1 FROM %s WHERE id = $1 FOR UPDATE", schema, id)
	resumed := make(chan error, 1)
	go func() {
		_, err := Resume(ctx, client, id, map[string]any{"s": 42})
		resumed <- err
	}()
	waitLockWaiters(t, pool, 1)
	cleaned := make(chan error, 1)
	go func() {
		// The query of the JobCleaner, with River's default retention.
		_, err := client.Driver().GetExecutor().JobDeleteBefore(ctx, &riverdriver.JobDeleteBeforeParams{
			CancelledDoDelete:           true,
			CancelledFinalizedAtHorizon: time.Now().Add(-24 * time.Hour),
			Max:                         1000,
			Schema:                      schema,
		})
		cleaned <- err
	}()
	waitLockWaiters(t, pool, 2)
	require.NoError(t, hold.Commit(ctx))
	require.NoError(t, <-resumed, "Resume made the job available")
	require.NoError(t, <-cleaned)
	_, err = client.JobGet(ctx, id)
	require.ErrorIs(t, err, rivertype.ErrNotFound, "the cleaner deleted the job Resume had made available")
}

// longArgs is a job whose Worker has a long timeout.
type longArgs struct{}

func (longArgs) Kind() string { return "durable_test_h110_long" }

// TestDeadMachinesJobIsRescued leaves in the database what a machine
// that died mid-run leaves: a job running for two hours on a machine
// that no longer works it, with the checkpoint its SaveEach stored (a
// succeeded) in its row. Another machine's River rescues it, as stuck,
// and retries it from that checkpoint: a's worker does not run, b's
// does. River rescues a job only once it has run for longer than both
// the client's RescueStuckJobsAfter and the job's timeout, which is the
// graph's plus a second: a job of the same age whose graph may run for
// three hours is left running.
func TestDeadMachinesJobIsRescued(t *testing.T) {
	url, schema := pgSchema(t)
	pool := newPool(t, url)
	ctx := context.Background()
	insertOnly, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	quick, err := insertOnly.Insert(ctx, sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	long, err := insertOnly.Insert(ctx, longArgs{}, nil)
	require.NoError(t, err)
	checkpoint := `{"river:resumable_step": "asynctool-graph", "river:resumable_cursor": {"asynctool-graph": {"a": 41}}}`
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET state = 'running', attempt = 1, attempted_at = now() - interval '2 hours', attempted_by = '{dead-machine}', metadata = $2"+
		" WHERE id = ANY($1)", []int64{quick.Job.ID, long.Job.ID}, checkpoint)
	require.NoError(t, err)

	var c rescue
	workers := c.workers(t)
	events := startSubscribed(t, riverpgxv5.New(newPool(t, url)), &river.Config{Schema: schema, RescueStuckJobsAfter: time.Hour, Workers: workers})
	c.check(t, waitFor(t, events, 1)[0], quick.Job.ID)

	row, err := insertOnly.JobGet(ctx, long.Job.ID)
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateRunning, row.State, "rescued only after its graph's three hours")
}

// TestStoppedMachinesJobGoesOnElsewhere stops machine m0's River
// client with StopAndCancel while its attempt of a job runs b, after a
// succeeded: the attempt, cancelled, stores the checkpoint without
// SaveEach, and River makes the job available again without counting the
// attempt. Machine m1 takes it and replays a.
func TestStoppedMachinesJobGoesOnElsewhere(t *testing.T) {
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
	config.RetryPolicy = retryNow{}
	client := testClient[pgx.Tx](t, driver, config)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	t.Cleanup(cancel)
	startClient(t, client)
	return events
}

// TestUniqueJobParked: to River a parked job is a cancelled one,
// and River's default unique states leave cancelled jobs out, so a
// unique job frees its unique key when it parks: a job with the same
// args can be inserted and run meanwhile, and then Resume cannot make
// the parked one available again. Resume's error was PostgreSQL's
// unique violation alone; it now says why, and what keeps the key:
// JobStateCancelled in UniqueOpts.ByState, with which the duplicate is
// not inserted.
func TestUniqueJobParked(t *testing.T) {
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

// TestRawMessageComesBackAsJSONBWritesIt: PostgreSQL stores the
// checkpoint as jsonb, which keeps the JSON value, not its bytes: a
// json.RawMessage result replays on PostgreSQL with its keys in jsonb's
// order, its duplicate keys dropped (the last kept), a space after each
// colon and comma, and no escape where none is needed; on SQLite, as
// encoding/json wrote it (compacted, "<" escaped as \u003c).
func TestRawMessageComesBackAsJSONBWritesIt(t *testing.T) {
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

// TestUnstorableIDInASubGraphOnPostgres: the ids of checkpointed nodes that a
// SubGraph's Build makes while the run goes on escape the check made
// before any node runs (TestNodeIDsMustBeStorable), and one with a NUL
// character went into the checkpoint, which PostgreSQL refused: the job
// stayed running until River's rescuer. The node now fails with
// ErrUnstorableID, and the attempt is recorded.
func TestUnstorableIDInASubGraphOnPostgres(t *testing.T) {
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

// TestUnstorableIDInASubGraphOfAParkedJobOnPostgres is
// TestUnstorableIDInASubGraphOnPostgres in an attempt that parks the job
// ("review" suspends): the park mark lists the graph's checkpointed
// nodes, for Resume, and listed "fetch\x00", which PostgreSQL refused, so
// the job stayed running until River's rescuer instead of parking.
func TestUnstorableIDInASubGraphOfAParkedJobOnPostgres(t *testing.T) {
	url, schema := pgSchema(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		sub := asynctool.NewWrapper("sub", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			f := intNode(cp, "fetch\x00", new(atomic.Int32), nil)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{f}, Output: func() (int, error) {
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0)
		review := asynctool.NewWrapper("review", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("a person must look")
		}), 0).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{sub, review}, nil
	}))
	client := newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, workers, retryNow{})
	events, cancel := client.Subscribe(river.EventKindJobFailed, river.EventKindJobCompleted, river.EventKindJobCancelled)
	defer cancel()
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	select {
	case ev := <-events:
		require.Equal(t, river.EventKindJobCancelled, ev.Kind)
		msg := ev.Job.Errors[len(ev.Job.Errors)-1].Error
		assert.Contains(t, msg, `suspended at "review"`)
	case <-time.After(30 * time.Second):
		row, err := client.JobGet(context.Background(), res.Job.ID)
		require.NoError(t, err)
		_, _ = client.JobCancel(context.Background(), res.Job.ID)
		t.Fatalf("the parking attempt was never recorded: after 30 s the job is %s (attempt %d)", row.State, row.Attempt)
	}
	_, err = Resume(context.Background(), client, res.Job.ID, map[string]any{"fetch\x00": 1})
	assert.ErrorContains(t, err, `no checkpointed node "fetch\x00"`)
}

// pgSave is a SaveFunc on PostgreSQL that stores the checkpoint with
// River's ResumableSetStepCursorTx, in a transaction of its own. If
// checkAttempt is set, it first locks the job's row and leaves it alone
// unless the row is running job's attempt, as SaveEach's doc advises.
// saved, if not nil, is called after each save, with whether it wrote.
func pgSave(pool *pgxpool.Pool, schema string, checkAttempt bool, saved func(job *river.Job[sumArgs], wrote bool)) SaveFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cursor map[string]json.RawMessage) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if checkAttempt {
			var attempt int
			var state string
			if err := tx.QueryRow(ctx, "SELECT attempt, state FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
				" WHERE id = $1 FOR UPDATE", job.ID).Scan(&attempt, &state); err != nil {
				return err
			}
			if attempt != job.Attempt || state != string(rivertype.JobStateRunning) {
				if err := tx.Rollback(ctx); err != nil {
					return err
				}
				if saved != nil {
					saved(job, false)
				}
				return nil // a later attempt holds the row
			}
		}
		if _, err := river.ResumableSetStepCursorTx[*riverpgxv5.Driver](ctx, tx, job, cursor); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if saved != nil {
			saved(job, true)
		}
		return nil
	}
}

// TestStaleAttemptSavesOverAParkedJob: an attempt that River rescued as
// stuck while its machine still ran it (here, made available by hand
// while machine m0 runs its attempt 1, as the rescuer would) goes on, and
// its SaveEach saves. Machine m1 runs attempt 2, which parks the job; then
// attempt 1's node a succeeds and its save replaced the row's checkpoint
// with its own, park mark and all: Resume refused the parked job with
// ErrNotParked. A save that checks the row's attempt first, as
// SaveEach's doc advises, leaves the parked job for Resume.
func TestStaleAttemptSavesOverAParkedJob(t *testing.T) {
	run := func(t *testing.T, checkAttempt bool) error {
		url, schema := pgSchema(t)
		gate, resumed := make(chan struct{}), make(chan struct{})
		var calls atomic.Int32
		aStarted := make(chan struct{}, 1)
		staleSaved := make(chan bool, 1)
		build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			a := Node(cp, "a", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				if calls.Add(1) == 1 { // attempt 1's, on m0
					aStarted <- struct{}{}
					<-gate
				}
				return 1, nil
			}), 0)
			s := Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				return 0, errors.New("a person must look")
			}), 0).OnFailure(asynctool.PolicySuspend)
			return []asynctool.Wrapper{a, s}, nil
		}
		// A machine with one worker: m0's is busy with attempt 1, so that
		// m0 does not take the job again.
		machine := func() *river.Client[pgx.Tx] {
			pool := newPool(t, url)
			w := mustWorker(t, newAsync(t), time.Minute, build).SaveEach(pgSave(pool, schema, checkAttempt, func(job *river.Job[sumArgs], wrote bool) {
				if job.Attempt == 1 {
					staleSaved <- wrote
					<-resumed // attempt 1 ends after the Resume
				}
			}))
			workers := river.NewWorkers()
			river.AddWorker(workers, w)
			// Not newClientIn: one worker per machine, so that m0, busy
			// with attempt 1, leaves attempt 2 to m1 (with newClientIn's
			// four, m0 took it itself and the test failed 2 runs of 5).
			client := testClient(t, riverpgxv5.New(pool), &river.Config{
				Schema:  schema,
				Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
				Workers: workers,
			})
			startClient(t, client)
			return client
		}
		m0 := machine()
		// After m0's Async, whose Close waits for attempt 1 (see releaser).
		release, resume := releaser(t, gate), releaser(t, resumed)
		res, err := m0.Insert(context.Background(), sumArgs{Base: 1}, nil)
		require.NoError(t, err)
		select {
		case <-aStarted:
		case <-time.After(30 * time.Second):
			t.Fatal("attempt 1 did not start")
		}
		_, err = newPool(t, url).Exec(context.Background(), "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
			" SET state = 'available', scheduled_at = now() WHERE id = $1", res.Job.ID)
		require.NoError(t, err)
		m1 := machine()
		events, cancel := m1.Subscribe(river.EventKindJobCancelled)
		defer cancel()
		select {
		case ev := <-events:
			require.Equal(t, 2, ev.Job.Attempt)
			require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, `suspended at "s"`)
		case <-time.After(30 * time.Second):
			t.Fatal("attempt 2 did not park the job")
		}
		release()
		select {
		case wrote := <-staleSaved:
			require.Equal(t, !checkAttempt, wrote, "attempt 1's save wrote the row")
		case <-time.After(30 * time.Second):
			t.Fatal("attempt 1 did not save a")
		}
		_, err = Resume(context.Background(), m1, res.Job.ID, map[string]any{"s": 42})
		resume()
		return err
	}
	t.Run("save without a check", func(t *testing.T) {
		err := run(t, false)
		require.ErrorIs(t, err, ErrNotParked, "the stale save dropped the park mark")
		assert.ErrorContains(t, err, "holds no park mark", "the error says what it found")
		assert.ErrorContains(t, err, "rescued as stuck", "and what may have done it")
	})
	t.Run("save that checks the attempt", func(t *testing.T) {
		require.NoError(t, run(t, true))
	})
}

// TestRescueByALeaderWithoutTheWorker: River's rescuer runs on whichever
// client of the database leads, and decides by that client's own
// Workers: a job whose kind the leader has no worker for is discarded
// when it is stuck, not retried, so that a durable job whose machine died
// is not resumed from its checkpoint. The package's doc says to register
// the Worker on every client that works jobs on the database.
func TestRescueByALeaderWithoutTheWorker(t *testing.T) {
	url, schema := pgSchema(t)
	pool := newPool(t, url)
	ctx := context.Background()
	insertOnly, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	res, err := insertOnly.Insert(ctx, sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET state = 'running', attempt = 1, attempted_at = now() - interval '2 hours', attempted_by = '{dead-machine}',"+
		` metadata = '{"river:resumable_cursor": {"asynctool-graph": {"a": 41}}}' WHERE id = $1`, res.Job.ID)
	require.NoError(t, err)

	// The only client, so the leader: it works another kind of job.
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, func(ctx context.Context, job *river.Job[longArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{intNode(cp, "a", new(atomic.Int32), nil)}, nil
	}))
	startSubscribed(t, riverpgxv5.New(newPool(t, url)), &river.Config{Schema: schema, RescueStuckJobsAfter: time.Hour, Workers: workers})
	deadline := time.Now().Add(30 * time.Second)
	for {
		row, err := insertOnly.JobGet(ctx, res.Job.ID)
		require.NoError(t, err)
		if row.State != rivertype.JobStateRunning {
			assert.Equal(t, rivertype.JobStateDiscarded, row.State, "rescued by a leader that does not know its kind")
			assert.Contains(t, string(row.Metadata), `"a": 41`, "the checkpoint is still in the row")
			return
		}
		require.True(t, time.Now().Before(deadline), "the stuck job was not rescued in 30 s")
		time.Sleep(50 * time.Millisecond)
	}
}
