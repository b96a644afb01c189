package durable

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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

// approvalWorker counts its runs in s and fails with "needs approval"
// until approved is set, then returns 1.
func approvalWorker(s *atomic.Int32, approved *atomic.Bool) asynctool.Worker[int, int] {
	return asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
		s.Add(1)
		if !approved.Load() {
			return 0, errors.New("needs approval")
		}
		return 1, nil
	})
}

// approvalGraph builds a (checkpointed) → s (checkpointed, PolicySuspend,
// fails until approved) → sink, which records the value it read from s.
func approvalGraph(a, s *atomic.Int32, approved *atomic.Bool, got *atomic.Int64) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		na := intNode(cp, "a", a, nil)
		ns := Node(cp, "s", approvalWorker(s, approved), 0).Depend(na, true).OnFailure(asynctool.PolicySuspend)
		sinkReading("s", got).Depend(ns, true)
		return []asynctool.Wrapper{na}, nil
	}
}

// parkApproval runs approvalGraph's job on SQLite until the job is
// parked, and returns the client, the job's id and the client's job
// events.
func parkApproval(t *testing.T, a, s *atomic.Int32, approved *atomic.Bool, got *atomic.Int64) (*river.Client[*sql.Tx], int64, <-chan *river.Event) {
	t.Helper()
	return runParked(t, approvalGraph(a, s, approved, got))
}

// TestResumeWithAValue parks a job on s, then resumes it with a value for
// s: the next attempt replays a and s (neither worker runs again) and the
// sink reads the value given.
func TestResumeWithAValue(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, events := parkApproval(t, &a, &s, &approved, &got)

	row, err := Resume(context.Background(), client, id, map[string]any{"s": 42})
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateAvailable, row.State)
	ev := waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCompleted, ev.Kind)
	assert.Equal(t, int32(1), a.Load(), "a was replayed")
	assert.Equal(t, int32(1), s.Load(), "s was replayed with the value given")
	assert.Equal(t, int64(42), got.Load())
}

// TestResumeWithoutValuesRunsTheNodeAgain resumes a parked job with no
// values, after the approval: s runs again and a is replayed.
func TestResumeWithoutValuesRunsTheNodeAgain(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, events := parkApproval(t, &a, &s, &approved, &got)

	approved.Store(true)
	_, err := Resume(context.Background(), client, id, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, 1)[0].Kind)
	assert.Equal(t, int32(1), a.Load())
	assert.Equal(t, int32(2), s.Load())
	assert.Equal(t, int64(1), got.Load())
}

// TestResumeRefuses checks Resume's errors: a running job, a job that
// does not exist, a value that does not encode.
func TestResumeRefuses(t *testing.T) {
	db := openSQLite(t)
	started, release := make(chan struct{}), make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{asynctool.NewWrapper("slow", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			close(started)
			<-release
			return 1, nil
		}), 0)}, nil
	}))
	client := newClient[*sql.Tx](t, riversqlite.New(db), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	<-started
	_, err = Resume(context.Background(), client, res.Job.ID, map[string]any{"slow": 2})
	assert.ErrorIs(t, err, ErrJobRunning)
	close(release)
	waitFor(t, events, 1)

	_, err = Resume(context.Background(), client, res.Job.ID+1000, nil)
	assert.ErrorIs(t, err, rivertype.ErrNotFound)
	assert.ErrorContains(t, err, "River's JobCleaner deletes it", "the error says why a parked job may be gone")
	_, err = Resume(context.Background(), client, res.Job.ID, nil)
	assert.ErrorIs(t, err, ErrNotParked, "a completed job is not parked")
}

// TestResumeChecksTheValues gives a parked job's Resume a value for a
// node the graph does not checkpoint (a typo), then one that does not
// encode: both are refused and nothing runs. A value of the wrong type
// fails the node on the next attempt instead of running its worker
// again: the job is parked again, with the decoding error.
func TestResumeChecksTheValues(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, events := parkApproval(t, &a, &s, &approved, &got)
	ctx := context.Background()
	_, err := Resume(ctx, client, id, map[string]any{"z": 1})
	assert.ErrorContains(t, err, `no checkpointed node "z" in the graph that parked the job (checkpointed: a, s; suspended: s)`)
	_, err = Resume(ctx, client, id, map[string]any{"s": func() {}})
	assert.ErrorContains(t, err, `the value of node "s"`)

	_, err = Resume(ctx, client, id, map[string]any{"s": "approved"})
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, `node "s": the value Resume gave does not decode into int`)
	assert.Equal(t, int32(1), s.Load(), "s's worker did not run again")
	assert.Equal(t, int32(1), a.Load())
}

// gatedApproval builds gate (not checkpointed; gateErr(n) is its error
// on its nth run, counting from 1 across attempts) → s (checkpointed,
// PolicySuspend, fails until approved; counts its worker's runs) → sink.
func gatedApproval(s *atomic.Int32, approved *atomic.Bool, gateErr func(n int32) error) BuildFunc[sumArgs] {
	var gates atomic.Int32
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		gate := asynctool.NewWrapper("gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 1, gateErr(gates.Add(1))
		}), 0)
		ns := Node(cp, "s", approvalWorker(s, approved), 0).Depend(gate, true).OnFailure(asynctool.PolicySuspend)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 1, nil
		}), 0).Depend(ns, true)
		return []asynctool.Wrapper{gate}, nil
	}
}

// runParked runs build's job on SQLite until it is parked, and returns
// the client, the job's id and the client's job events.
func runParked(t *testing.T, build BuildFunc[sumArgs]) (*river.Client[*sql.Tx], int64, <-chan *river.Event) {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), time.Minute, build))
	client := newClient[*sql.Tx](t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed, river.EventKindJobSnoozed)
	t.Cleanup(cancel)
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCancelled, waitFor(t, events, 1)[0].Kind)
	return client, res.Job.ID, events
}

// untilParkedOrDone waits past failed and snoozed attempts for the event
// that ends the job or parks it.
func untilParkedOrDone(t *testing.T, events <-chan *river.Event) *river.Event {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ev := waitFor(t, events, 1)[0]
		if ev.Kind != river.EventKindJobFailed && ev.Kind != river.EventKindJobSnoozed {
			return ev
		}
	}
	t.Fatal("the job kept failing or snoozing for a minute")
	return nil
}

// TestResumeOfAGraphThatCheckpointsNoNode parks a job on a plain node (not
// made with Node): Resume cannot give it a value, and its error says why
// rather than listing no checkpointed nodes as an empty string.
func TestResumeOfAGraphThatCheckpointsNoNode(t *testing.T) {
	var s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		ns := asynctool.NewWrapper("s", approvalWorker(&s, &approved), 0).OnFailure(asynctool.PolicySuspend)
		sinkReading("s", &got).Depend(ns, true)
		return []asynctool.Wrapper{ns}, nil
	})
	_, err := Resume(context.Background(), client, id, map[string]any{"s": 42})
	require.Error(t, err)
	assert.Equal(t, fmt.Sprintf(`durable: Resume of job %d: no checkpointed node "s" in the graph that parked the job: it checkpoints no node, and only nodes made with Node take a value (suspended: s)`, id), err.Error())
}

// TestDecidedValueOutlivesAnAttempt gives s, through Resume, a value of
// the wrong type, and then makes the attempt after Resume fail, snooze or
// park again before the value is read: however many attempts later, s's
// worker never runs again.
func TestDecidedValueOutlivesAnAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate func(n int32) error
	}{
		{"failed attempt", func(n int32) error {
			if n == 2 { // the attempt after Resume
				return errors.New("gate: transient")
			}
			return nil
		}},
		{"snoozed attempt", func(n int32) error {
			if n == 2 {
				return river.JobSnooze(time.Millisecond)
			}
			return nil
		}},
		{"parked again", func(int32) error { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s atomic.Int32
			var approved atomic.Bool
			client, id, events := runParked(t, gatedApproval(&s, &approved, tc.gate))
			_, err := Resume(context.Background(), client, id, map[string]any{"s": "approved"}) // not an int
			require.NoError(t, err)
			ev := untilParkedOrDone(t, events)
			require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again, on the decoding error")
			assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, "the value Resume gave does not decode")
			// A Resume without values keeps the decided value.
			_, err = Resume(context.Background(), client, id, nil)
			require.NoError(t, err)
			require.Equal(t, river.EventKindJobCancelled, untilParkedOrDone(t, events).Kind)
			assert.Equal(t, int32(1), s.Load(), "s's worker ran only before the Resume")
		})
	}
}

// TestCancelledJobIsNotParked checks that a job is resumable only while
// its last attempt parked it: a resumed job that its BuildFunc, or a node
// with river.JobCancel, then cancels is refused.
func TestCancelledJobIsNotParked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(cancelled *atomic.Bool, inner BuildFunc[sumArgs]) BuildFunc[sumArgs]
	}{
		{"by its BuildFunc", func(cancelled *atomic.Bool, inner BuildFunc[sumArgs]) BuildFunc[sumArgs] {
			return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
				if cancelled.Load() {
					return nil, river.JobCancel(errors.New("order deleted"))
				}
				return inner(ctx, job, cp)
			}
		}},
		{"by a node, while another suspends", func(cancelled *atomic.Bool, inner BuildFunc[sumArgs]) BuildFunc[sumArgs] {
			return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
				starts, err := inner(ctx, job, cp)
				withdraw := asynctool.NewWrapper("withdraw", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
					if cancelled.Load() {
						return 0, river.JobCancel(errors.New("order withdrawn"))
					}
					return 1, nil
				}), 0).OnFailure(asynctool.PolicyContinue)
				return append(starts, withdraw), err
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s atomic.Int32
			var approved, cancelled atomic.Bool
			client, id, events := runParked(t, tc.build(&cancelled, gatedApproval(&s, &approved, func(int32) error { return nil })))
			cancelled.Store(true)
			_, err := Resume(context.Background(), client, id, nil)
			require.NoError(t, err)
			require.Equal(t, river.EventKindJobCancelled, untilParkedOrDone(t, events).Kind)
			_, err = Resume(context.Background(), client, id, nil)
			assert.ErrorIs(t, err, ErrNotParked)
			assert.ErrorContains(t, err, "it was cancelled for another reason", "the mark Resume left is no park mark")
		})
	}
}

// TestParkedJobRetriedIsNotParked: a parked job that Client.JobRetry made
// available, and that has not run yet, waits for a retry: though its row
// still holds the mark of the attempt that parked it, Resume refuses it
// with ErrNotParked and says which state the job is in.
func TestParkedJobRetriedIsNotParked(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	require.NoError(t, client.Stop(context.Background()), "stopped, the client leaves the retried job available")
	_, err := client.JobRetry(context.Background(), id)
	require.NoError(t, err)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 42})
	assert.ErrorIs(t, err, ErrNotParked)
	assert.ErrorContains(t, err, fmt.Sprintf("job %d is available", id))
	assert.Equal(t, int32(1), s.Load())
}

// TestDecidedValueWithRetries gives a node under asynctool's Retry a
// decided value that does not decode: its worker never runs, the retries
// end, and the job parks again.
func TestDecidedValueWithRetries(t *testing.T) {
	var s, builds atomic.Int32
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		builds.Add(1)
		ns := Node(cp, "s", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			s.Add(1)
			return 0, errors.New("needs approval")
		}), 0).Retry(asynctool.RetryPolicy{Attempts: 3}).OnFailure(asynctool.PolicySuspend)
		return []asynctool.Wrapper{ns}, nil
	})
	runs := s.Load()
	_, err := Resume(context.Background(), client, id, map[string]any{"s": "x"})
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCancelled, untilParkedOrDone(t, events).Kind)
	assert.Equal(t, runs, s.Load())
	assert.Equal(t, int32(2), builds.Load())
}

// TestParkMarkIsNoResult checks that the park mark, stored under the
// empty id, is not reported as a node's stored result.
func TestParkMarkIsNoResult(t *testing.T) {
	cp := newCheckpoint(map[string]json.RawMessage{parkKey: json.RawMessage(`{"decided":["s"]}`), "s": json.RawMessage(`1`)})
	assert.False(t, cp.Has(""))
	assert.True(t, cp.Has("s"))
	assert.True(t, cp.decided["s"])
}

// TestResumeRefusesANilContextOrClient checks that Resume, which
// returns errors, returns one for a nil ctx or client, or a zero client
// not made by river.NewClient, where it panicked with a nil dereference.
func TestResumeRefusesANilContextOrClient(t *testing.T) {
	var (
		ctx    context.Context
		client *river.Client[*sql.Tx]
	)
	require.NotPanics(t, func() {
		_, err := Resume(ctx, client, 7, nil)
		assert.ErrorIs(t, err, asynctool.ErrNilContext)
		_, err = Resume(context.Background(), client, 7, nil)
		assert.ErrorContains(t, err, "durable: Resume of job 7 with a nil *river.Client")
		_, err = Resume(context.Background(), &river.Client[*sql.Tx]{}, 7, nil)
		assert.ErrorContains(t, err, "durable: Resume of job 7 with a zero river.Client")
	})
}

// TestUndecodableResumeValueNamesTheType checks that the error of a
// value Resume gave that does not decode names the node's result type
// when that type is an interface, where %T of its zero value printed
// "<nil>".
func TestUndecodableResumeValueNamesTheType(t *testing.T) {
	cp := newCheckpoint(map[string]json.RawMessage{"n": json.RawMessage(`"x"`)})
	cp.decided = map[string]bool{"n": true}
	_, err := (&checkpointed[int, fmt.Stringer]{cp: cp, id: "n"}).decodeSaved(cp.saved["n"])
	require.Error(t, err)
	assert.Contains(t, err.Error(), `node "n": the value Resume gave does not decode into fmt.Stringer`)
	_, err = (&checkpointed[int, int]{cp: cp, id: "n"}).decodeSaved(cp.saved["n"])
	assert.ErrorContains(t, err, "does not decode into int")
}

// joinSuspended builds up (failing, not checkpointed) → c (checkpointed,
// suspended by its custom join while up has failed) → sink, which
// records the value it read from c; c's worker counts its runs.
func joinSuspended(c *atomic.Int32, got *atomic.Int64) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		up := asynctool.NewWrapper("up", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("the partner's API is down")
		}), 0)
		nc := Node(cp, "c", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			c.Add(1)
			return 1, nil
		}), 0).Depend(up, true).Join(asynctool.CustomJoin(func(ups []asynctool.Upstream) asynctool.Decision {
			if !ups[0].OK {
				return asynctool.DecideSuspend // a person decides
			}
			return asynctool.DecideRun
		}))
		sinkReading("c", got).Depend(nc, true)
		return []asynctool.Wrapper{up}, nil
	}
}

// TestResumeDecidesANodeACustomJoinSuspended guards Resume's promise to
// decide a suspended node's result for a node a custom join suspended
// (DecideSuspend): the join, asked again on the next attempt, suspends
// the node again and never lets its Action, which replays the value, run;
// the attempt must end the node with the value itself, or the job parks
// again on every Resume. A value that does not decode parks the job
// again, with the decoding error, and the worker does not run.
func TestResumeDecidesANodeACustomJoinSuspended(t *testing.T) {
	t.Run("value", func(t *testing.T) {
		var c atomic.Int32
		var got atomic.Int64
		client, id, events := runParked(t, joinSuspended(&c, &got))
		_, err := Resume(context.Background(), client, id, map[string]any{"c": 5})
		require.NoError(t, err)
		ev := untilParkedOrDone(t, events)
		assert.Equal(t, river.EventKindJobCompleted, ev.Kind, "c was decided by Resume; errors: %v", ev.Job.Errors)
		assert.Equal(t, int64(5), got.Load())
		assert.Zero(t, c.Load(), "c's worker never ran")
	})
	t.Run("value, beside a node that suspends again", func(t *testing.T) {
		// The stall at which c takes its value also finds s suspended,
		// without one: the run goes on past c, whose sink reads the
		// value, and parks on s alone.
		var c, s atomic.Int32
		var got atomic.Int64
		var approved atomic.Bool
		inner := joinSuspended(&c, &got)
		client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
			starts, err := inner(ctx, job, cp)
			g := asynctool.NewWrapper("g", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				return 1, nil
			}), 0)
			Node(cp, "s", approvalWorker(&s, &approved), 0).Depend(g, true).OnFailure(asynctool.PolicySuspend)
			return append(starts, g), err
		})
		_, err := Resume(context.Background(), client, id, map[string]any{"c": 5})
		require.NoError(t, err)
		ev := untilParkedOrDone(t, events)
		require.Equal(t, river.EventKindJobCancelled, ev.Kind, "s parks the job again")
		assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, `the graph suspended at "s" (needs approval); failed: "up"`)
		assert.Equal(t, int64(5), got.Load(), "c's sink read the value")
		approved.Store(true)
		_, err = Resume(context.Background(), client, id, nil)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, untilParkedOrDone(t, events).Kind)
		assert.Zero(t, c.Load(), "c's worker never ran")
		assert.Equal(t, int32(3), s.Load(), "s ran on each attempt until approved")
	})
	t.Run("value that does not decode", func(t *testing.T) {
		var c atomic.Int32
		var got atomic.Int64
		client, id, events := runParked(t, joinSuspended(&c, &got))
		_, err := Resume(context.Background(), client, id, map[string]any{"c": "five"})
		require.NoError(t, err)
		ev := untilParkedOrDone(t, events)
		require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
		assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, `suspended at "c" (durable: node "c": the value Resume gave does not decode into int`)
		assert.Zero(t, c.Load(), "c's worker never ran")
		_, err = Resume(context.Background(), client, id, map[string]any{"c": 6})
		require.NoError(t, err, "still resumable")
		require.Equal(t, river.EventKindJobCompleted, untilParkedOrDone(t, events).Kind)
		assert.Equal(t, int64(6), got.Load())
	})
}

// TestDecidedValueInASubGraphOutlivesAnAttempt: Resume gives a value to
// "sg/charge", a checkpointed node that the SubGraph "sg" builds, whose
// failure suspended sg and parked the job. The attempt after Resume fails
// at "gate", upstream of sg, which does not run; the one after runs sg,
// whose node must take the value given: the checkpoint of the attempt in
// between dropped it, the node ran its worker again, and the job parked
// again.
func TestDecidedValueInASubGraphOutlivesAnAttempt(t *testing.T) {
	var charges atomic.Int32
	var got atomic.Int64
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		gate := asynctool.NewWrapper("gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if job.Attempt == 2 {
				return 0, errors.New("the gate is closed on attempt 2")
			}
			return 1, nil
		}), 0)
		sg := asynctool.NewWrapper("sg", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			c := Node(cp, "sg/charge", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
				charges.Add(1)
				return 0, errors.New("a person must decide the charge")
			}), 0)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{c}, Output: func() (int, error) {
				r := c.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0).Depend(gate, true).OnFailure(asynctool.PolicySuspend)
		sinkReading("sg", &got).Depend(sg, true)
		return []asynctool.Wrapper{gate}, nil
	})
	_, err := Resume(context.Background(), client, id, map[string]any{"sg/charge": 5})
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "the job parked again: %v", ev.Job.Errors[len(ev.Job.Errors)-1].Error)
	assert.Equal(t, 3, ev.Job.Attempt)
	assert.Equal(t, int64(5), got.Load())
	assert.Equal(t, int32(1), charges.Load(), "the worker ran on the first attempt only")
}
