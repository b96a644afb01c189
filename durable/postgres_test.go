package durable

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
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

// openPostgres returns a pool on the test database and a fresh schema
// with River's tables, dropped when t ends.
func openPostgres(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := os.Getenv(pgEnv)
	if url == "" {
		if os.Getenv(pgRequired) != "" {
			t.Fatalf("%s is set but %s is empty", pgRequired, pgEnv)
		}
		t.Skipf("%s is not set: no PostgreSQL server for the tests of several machines", pgEnv)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	schema := fmt.Sprintf("durable_test_%d", time.Now().UnixNano())
	_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	mig, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	require.NoError(t, err)
	_, err = mig.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	return pool, schema
}

// TestSeveralMachinesShareJobs runs three clients on one PostgreSQL
// database, each with its own Async, as three machines would. Every job
// is claimed by exactly one of them per attempt, and a job whose first
// attempt fails is resumed by whichever machine claims the retry: its
// checkpoint is in the database, so node a runs once per job however many
// machines take part.
func TestSeveralMachinesShareJobs(t *testing.T) {
	pool, schema := openPostgres(t)
	const jobs = 30
	var mu sync.Mutex
	runsA := map[int64]int{} // job id → runs of node a, over all machines
	attemptsB := map[int64]int{}
	machineOf := map[int64]map[string]bool{} // job id → machines that ran an attempt
	build := func(name string) BuildFunc[sumArgs] {
		return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			mu.Lock()
			if machineOf[job.ID] == nil {
				machineOf[job.ID] = map[string]bool{}
			}
			machineOf[job.ID][name] = true
			mu.Unlock()
			a := Node(cp, "a", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				mu.Lock()
				runsA[job.ID]++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // long enough for claims to overlap
				return job.Args.Base, nil
			}), 0)
			Node(cp, "b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
				mu.Lock()
				attemptsB[job.ID]++
				n := attemptsB[job.ID]
				mu.Unlock()
				if job.Args.Base%2 == 0 && n == 1 {
					return 0, fmt.Errorf("job %d: b fails its first attempt", job.ID)
				}
				r, err := asynctool.ResultOf[int](all, "a")
				return r.Value + 1, err
			}), 0).Depend(a, true)
			return []asynctool.Wrapper{a}, nil
		}
	}
	// Three clients, each with its own Async, share nothing but the
	// database, as three machines would.
	var clients []*river.Client[pgx.Tx]
	for k := range 3 {
		workers := river.NewWorkers()
		river.AddWorker(workers, NewWorker(newAsync(t), 10*time.Second, build(fmt.Sprint("m", k))))
		clients = append(clients, newClientIn[pgx.Tx](t, riverpgxv5.New(pool), schema, workers))
	}
	// A client reports the jobs it worked: listen to all three.
	done := make(chan int64, jobs)
	for _, c := range clients {
		evs, cancel := c.Subscribe(river.EventKindJobCompleted)
		t.Cleanup(cancel)
		go func() {
			for ev := range evs {
				done <- ev.Job.ID
			}
		}()
	}
	for k := range jobs {
		_, err := clients[k%3].Insert(context.Background(), sumArgs{Base: k}, nil)
		require.NoError(t, err)
	}
	completed := map[int64]bool{}
	timeout := time.After(60 * time.Second)
	for len(completed) < jobs {
		select {
		case id := <-done:
			assert.False(t, completed[id], "job %d completed twice", id)
			completed[id] = true
		case <-timeout:
			t.Fatalf("%d of %d jobs completed", len(completed), jobs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	used := map[string]bool{}
	for id := range completed {
		assert.Equal(t, 1, runsA[id], "job %d: node a ran once over all attempts and machines", id)
		for m := range machineOf[id] {
			used[m] = true
		}
	}
	retried := 0
	for id, n := range attemptsB {
		if n > 1 {
			retried++
			assert.Equal(t, 2, n, "job %d", id)
		}
	}
	assert.Equal(t, jobs/2, retried, "every even job was retried once")
	t.Logf("machines that ran attempts: %d of 3", len(used))
}
