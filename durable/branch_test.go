package durable

import (
	"context"
	"errors"
	"sync"
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

// routeKey is a struct a switch chooses its branch by.
type routeKey struct {
	Kind   string   `json:"kind"`
	Region string   `json:"region"`
	Tags   []string `json:"tags"`
}

// switchRuns counts, for a job of switchGraph, the runs of its workers,
// and records what the conditions saw and what page read.
type switchRuns[R any] struct {
	route, cache, db, audit, page atomic.Int32
	mu                            sync.Mutex
	saw                           map[string][]R // condition's node → the values it was asked about
	read                          int
}

func newSwitchRuns[R any]() *switchRuns[R] { return &switchRuns[R]{saw: map[string][]R{}} }

// switchGraph builds a switch on route's value (route's worker returns
// v; pick names the branch a value chooses):
//
//	route (checkpointed) ─▶ cache (checkpointed, When pick == "cache") ─must─▶ audit
//	                     ─▶ db    (checkpointed, When pick == "db")
//	cache, db ──optional─▶ page, which fails while failPage(attempt)
//
// audit and page are the sinks: when db is chosen, audit is a sink not
// taken.
func switchGraph[R any](v R, pick func(R) string, failPage func(attempt int) bool, runs *switchRuns[R]) BuildFunc[sumArgs] {
	when := func(branch string) asynctool.Join {
		return asynctool.When("route", func(r R) bool {
			runs.mu.Lock()
			runs.saw[branch] = append(runs.saw[branch], r)
			runs.mu.Unlock()
			return pick(r) == branch
		})
	}
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		route := Node(cp, "route", asynctool.WorkerFunc[int, R](func(context.Context, int, asynctool.Wrappers) (R, error) {
			runs.route.Add(1)
			return v, nil
		}), 0)
		cache := intNode(cp, "cache", &runs.cache, nil).Depend(route, true).Join(when("cache"))
		db := Node(cp, "db", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			runs.db.Add(1)
			return 2, nil
		}), 0).Depend(route, true).Join(when("db"))
		asynctool.NewWrapper("audit", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			runs.audit.Add(1)
			return 0, nil
		}), 0).Depend(cache, true)
		asynctool.NewWrapper("page", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			runs.page.Add(1)
			if failPage(job.Attempt) {
				return 0, errors.New("page is down")
			}
			got := 0
			for _, id := range []string{"cache", "db"} {
				if r, err := asynctool.ResultOf[int](all, id); err == nil && r.State == asynctool.ResultSuccess {
					got += r.Value
				}
			}
			runs.mu.Lock()
			runs.read = got
			runs.mu.Unlock()
			return got, nil
		}), 0).Depend(cache, false).Depend(db, false)
		return []asynctool.Wrapper{route}, nil
	}
}

// checkSwitch runs switchGraph's job with v, which chooses db, through
// run, and checks it: with page failing its first attempt, the retry
// replays route and db, its condition sees v again (decoded from the
// checkpoint's JSON), cache and audit are not taken on both attempts and
// are not named as failures; with page succeeding, one attempt completes
// the job although audit, a sink, was not taken.
func checkSwitch[R any](t *testing.T, v R, pick func(R) string, run func(t *testing.T, build BuildFunc[sumArgs]) []*river.Event) {
	t.Run("retried", func(t *testing.T) {
		runs := newSwitchRuns[R]()
		evs := run(t, switchGraph(v, pick, func(attempt int) bool { return attempt == 1 }, runs))
		require.Len(t, evs, 2)
		require.Equal(t, river.EventKindJobFailed, evs[0].Kind)
		msg := lastError(t, evs[0])
		assert.Contains(t, msg, `durable: 1 node(s) did not succeed: "page" failed (page is down)`, "only page failed")
		assert.NotContains(t, msg, `"cache"`)
		assert.NotContains(t, msg, `"audit"`)
		require.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
		assert.Equal(t, 2, evs[1].Job.Attempt)

		assert.Equal(t, int32(1), runs.route.Load(), "route was replayed")
		assert.Equal(t, int32(1), runs.db.Load(), "db was replayed")
		assert.Zero(t, runs.cache.Load(), "cache was never taken")
		assert.Zero(t, runs.audit.Load(), "audit was never taken")
		assert.Equal(t, int32(2), runs.page.Load())
		runs.mu.Lock()
		defer runs.mu.Unlock()
		assert.Equal(t, map[string][]R{"cache": {v, v}, "db": {v, v}}, runs.saw, "each condition saw the same value on the replay")
		assert.Equal(t, 2, runs.read, "page read db's replayed value")
	})
	t.Run("one attempt", func(t *testing.T) {
		runs := newSwitchRuns[R]()
		evs := run(t, switchGraph(v, pick, func(int) bool { return false }, runs))
		require.Len(t, evs, 1)
		assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind, "a sink not taken does not fail the job")
		assert.Zero(t, runs.audit.Load())
		assert.Equal(t, int32(1), runs.db.Load())
	})
}

// onSQLite runs build's job on SQLite, with three attempts.
func onSQLite(t *testing.T, build BuildFunc[sumArgs]) []*river.Event {
	return runJob(t, 3, 10*time.Second, build)
}

// TestWhenSwitchAcrossAttempts checks a switch (asynctool.When) in a
// durable graph, for a route of several types: the value its conditions
// see on a retry comes back from the checkpoint's JSON.
func TestWhenSwitchAcrossAttempts(t *testing.T) {
	t.Run("string", func(t *testing.T) {
		checkSwitch(t, "db", func(s string) string { return s }, onSQLite)
	})
	key := routeKey{Kind: "db", Region: "eu", Tags: []string{"a", "b"}}
	t.Run("struct", func(t *testing.T) {
		checkSwitch(t, key, func(k routeKey) string { return k.Kind }, onSQLite)
	})
	t.Run("pointer", func(t *testing.T) {
		checkSwitch(t, &key, func(k *routeKey) string { return k.Kind }, onSQLite)
	})
}

// TestWhenSwitchOnPostgres is TestWhenSwitchAcrossAttempts's struct on
// PostgreSQL, where the checkpoint is stored as jsonb (which reorders
// keys).
func TestWhenSwitchOnPostgres(t *testing.T) {
	key := routeKey{Kind: "db", Region: "eu", Tags: []string{"a", "b"}}
	checkSwitch(t, key, func(k routeKey) string { return k.Kind }, func(t *testing.T, build BuildFunc[sumArgs]) []*river.Event {
		url, schema := pgSchema(t)
		workers := river.NewWorkers()
		river.AddWorker(workers, mustWorker(t, newAsync(t), 10*time.Second, build))
		client := newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, workers, retryNow{})
		events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
		defer cancel()
		_, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 3})
		require.NoError(t, err)
		var got []*river.Event
		for {
			ev := waitFor(t, events, 1)[0]
			got = append(got, ev)
			if ev.Kind != river.EventKindJobFailed || ev.Job.State == rivertype.JobStateDiscarded {
				return got
			}
		}
	})
}

// TestEverySinkNotTaken checks that a job whose only sink is not taken
// completes.
func TestEverySinkNotTaken(t *testing.T) {
	var a, b atomic.Int32
	evs := runJob(t, 3, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", &a, nil)
		intNode(cp, "b", &b, nil).Depend(na, true).Join(asynctool.When("a", func(v int) bool { return v == 2 }))
		return []asynctool.Wrapper{na}, nil
	})
	require.Len(t, evs, 1)
	assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind)
	assert.Zero(t, b.Load())
}

// parkedSwitch builds a switch whose branches are decided by a person:
//
//	route (checkpointed; PolicySuspend, fails with "needs a decision"
//	       while decide is false, then returns "pay")
//	  ─▶ pay  (checkpointed, When route == "pay"; PolicySuspend, fails
//	           with "needs approval" while approved is false)
//	  ─▶ free (checkpointed, When route == "free")
//	pay, free ──optional─▶ sink, which records the value it read
func parkedSwitch(decide, approved *atomic.Bool, route, pay, free *atomic.Int32, got *atomic.Int64) BuildFunc[sumArgs] {
	is := func(want string) func(string) bool { return func(v string) bool { return v == want } }
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		r := Node(cp, "route", asynctool.WorkerFunc[int, string](func(context.Context, int, asynctool.Wrappers) (string, error) {
			route.Add(1)
			if !decide.Load() {
				return "", errors.New("needs a decision")
			}
			return "pay", nil
		}), 0).OnFailure(asynctool.PolicySuspend)
		p := Node(cp, "pay", approvalWorker(pay, approved), 0).Depend(r, true).Join(asynctool.When("route", is("pay"))).
			OnFailure(asynctool.PolicySuspend)
		f := intNode(cp, "free", free, nil).Depend(r, true).Join(asynctool.When("route", is("free")))
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			v := int64(0)
			for _, id := range []string{"pay", "free"} {
				if r, err := asynctool.ResultOf[int](all, id); err == nil && r.State == asynctool.ResultSuccess {
					v = v*100 + int64(r.Value)
				}
			}
			got.Store(v)
			return int(v), nil
		}), 0).Depend(p, false).Depend(f, false)
		return []asynctool.Wrapper{r}, nil
	}
}

// TestWhenBranchParks parks a job on a node of the branch its switch
// chose, and resumes it: the branch not taken is not named among the
// failures that parked it, the retry chooses the same branch from the
// checkpoint, and the sink reads the value Resume gave.
func TestWhenBranchParks(t *testing.T) {
	var decide, approved atomic.Bool
	decide.Store(true)
	var route, pay, free atomic.Int32
	var got atomic.Int64
	client, id, events := runParked(t, parkedSwitch(&decide, &approved, &route, &pay, &free, &got))
	row, err := client.JobGet(context.Background(), id)
	require.NoError(t, err)
	msg := row.Errors[len(row.Errors)-1].Error
	assert.Equal(t, `JobCancelError: durable: the graph suspended at "pay" (needs approval); resume the job with durable.Resume`, msg, "free, not taken, is no failure")

	_, err = Resume(context.Background(), client, id, map[string]any{"pay": 42})
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCompleted, ev.Kind)
	assert.Equal(t, int32(1), route.Load(), "route was replayed")
	assert.Equal(t, int32(1), pay.Load(), "pay was replayed with the value given")
	assert.Zero(t, free.Load(), "free was never taken")
	assert.Equal(t, int64(42), got.Load())
}

// TestResumeChoosesTheBranch parks a job on its switch's route node and
// resumes it with the route's value: the retry's conditions see the value
// Resume gave, decoded from the checkpoint, and take the branch it
// names; the other branch, itself under PolicySuspend, is not taken and
// does not park the job again.
func TestResumeChoosesTheBranch(t *testing.T) {
	var decide, approved atomic.Bool
	var route, pay, free atomic.Int32
	var got atomic.Int64
	client, id, events := runParked(t, parkedSwitch(&decide, &approved, &route, &pay, &free, &got))

	_, err := Resume(context.Background(), client, id, map[string]any{"route": "free"})
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCompleted, ev.Kind)
	assert.Equal(t, int32(1), route.Load(), "route took the value given")
	assert.Zero(t, pay.Load(), "pay was not taken")
	assert.Equal(t, int32(1), free.Load())
	assert.Equal(t, int64(1), got.Load(), "the sink read free's value")
}

// TestWhenOnAnAnyNodeAfterAReplay checks what Node's doc says of a
// switch on a checkpointed node whose result type is any: its value comes
// back from JSON with JSON's own types, so a When[int] condition that
// chose a branch on the first attempt fails its node on the replay, where
// the value is a float64.
func TestWhenOnAnAnyNodeAfterAReplay(t *testing.T) {
	var b atomic.Int32
	evs := runJob(t, 2, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, any](func(context.Context, int, asynctool.Wrappers) (any, error) {
			return 2, nil
		}), 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			b.Add(1)
			if job.Attempt == 1 {
				return 0, errors.New("b is down")
			}
			return 0, nil
		}), 0).Depend(a, true).Join(asynctool.When("a", func(v int) bool { return v == 2 }))
		return []asynctool.Wrapper{a}, nil
	})
	require.Len(t, evs, 2)
	assert.Equal(t, int32(1), b.Load(), "b was taken on the first attempt only")
	require.Equal(t, rivertype.JobStateDiscarded, evs[1].Job.State)
	assert.Contains(t, lastError(t, evs[1]), `When("a") takes int, and the upstream's value is a float64, 2`)
	assert.Contains(t, lastError(t, evs[1]), asynctool.ErrResultType.Error())
}

// TestFallbackAcrossAttempts checks a fallback (asynctool.WhenResult)
// in a durable graph: a checkpointed primary that succeeded is replayed
// on the retry, so the backup's condition sees the same result (the
// decoded value, a success, no error) and the backup is not taken on
// either attempt; and a primary whose result type is any and that fails
// without a default has the backup run, whose value the sink reads.
func TestFallbackAcrossAttempts(t *testing.T) {
	t.Run("primary replayed", func(t *testing.T) {
		var primary, backup, quote atomic.Int32
		var mu sync.Mutex
		var saw []asynctool.WorkResult[int]
		evs := runJob(t, 3, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			p := intNode(cp, "primary", &primary, nil)
			b := intNode(cp, "backup", &backup, nil).Depend(p, false).
				Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool {
					mu.Lock()
					saw = append(saw, r)
					mu.Unlock()
					return r.State != asynctool.ResultSuccess
				}))
			asynctool.NewWrapper("quote", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
				quote.Add(1)
				if job.Attempt == 1 {
					return 0, errors.New("quote is down")
				}
				r, err := p.ResultFrom(all)
				return r.Value, err
			}), 0).Depend(p, false).Depend(b, false)
			return []asynctool.Wrapper{p}, nil
		})
		require.Len(t, evs, 2)
		assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
		assert.Equal(t, int32(1), primary.Load(), "primary was replayed")
		assert.Zero(t, backup.Load())
		assert.Equal(t, int32(2), quote.Load())
		mu.Lock()
		defer mu.Unlock()
		// The page may run on primary's success before backup's join is
		// asked, and backup be short-circuited: its condition is asked
		// at most once per attempt, and sees the same result each time.
		for _, r := range saw {
			assert.Equal(t, asynctool.WorkResult[int]{Value: 1, State: asynctool.ResultSuccess}, r)
		}
	})
	t.Run("primary failed, then runs again", func(t *testing.T) {
		var backup, primary atomic.Int32
		// taken records the condition's answers by attempt: the backup,
		// checkpointed once it ran, would be replayed, not called, if the
		// retry took it, so its call count cannot tell.
		var mu sync.Mutex
		taken := map[int][]bool{}
		evs := runJob(t, 3, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			p := Node(cp, "primary", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				primary.Add(1)
				if job.Attempt == 1 {
					return 0, errors.New("primary is down")
				}
				return 1, nil
			}), 0)
			b := intNode(cp, "backup", &backup, nil).Depend(p, false).
				Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool {
					take := r.State != asynctool.ResultSuccess
					mu.Lock()
					taken[job.Attempt] = append(taken[job.Attempt], take)
					mu.Unlock()
					return take
				}))
			asynctool.NewWrapper("quote", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				if job.Attempt == 1 {
					return 0, errors.New("quote is down")
				}
				return 0, nil
			}), 0).Depend(p, false).Depend(b, false)
			return []asynctool.Wrapper{p}, nil
		})
		require.Len(t, evs, 2)
		assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
		assert.Equal(t, int32(1), backup.Load(), "the backup ran on the first attempt")
		assert.Equal(t, int32(2), primary.Load(), "the retry called the primary again")
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []bool{true}, taken[1], "the first attempt took the backup")
		// The quote may run on the primary's success and the backup be
		// short-circuited before its join is asked: at most one answer.
		assert.NotContains(t, taken[2], true, "the retry did not take the backup")
		assert.LessOrEqual(t, len(taken[2]), 1)
	})
	t.Run("any primary fails", func(t *testing.T) {
		var backup atomic.Int32
		var got atomic.Int64
		evs := runJob(t, 2, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			p := Node(cp, "primary", asynctool.WorkerFunc[int, any](func(context.Context, int, asynctool.Wrappers) (any, error) {
				return nil, errors.New("primary is down")
			}), 0)
			b := intNode(cp, "backup", &backup, nil).Depend(p, false).
				Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool { return r.State != asynctool.ResultSuccess }))
			asynctool.NewWrapper("quote", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
				r, err := b.ResultFrom(all)
				got.Store(int64(r.Value))
				return r.Value, err
			}), 0).Depend(p, false).Depend(b, false)
			return []asynctool.Wrapper{p}, nil
		})
		require.Len(t, evs, 1)
		assert.Equal(t, river.EventKindJobCompleted, evs[0].Kind, "the primary is no sink: its failure, tolerated, does not fail the job")
		assert.Equal(t, int32(1), backup.Load())
		assert.Equal(t, int64(1), got.Load())
	})
}
