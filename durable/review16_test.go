package durable

import (
	"context"
	"encoding/json"
	"errors"
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

// Regression tests for helper-41's review of the durable module.

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
}

// resultThenFailure builds a → b, a checkpointed and returning v, b
// failing: the attempt fails and stores a's result, if a succeeded.
func resultThenFailure[R any](v R) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, R](func(context.Context, int, asynctool.Wrappers) (R, error) {
			return v, nil
		}), 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, errors.New("b is down")
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}
}

// nulResult is a result with a NUL character.
var nulResult = resultThenFailure("raw\x00bytes")

// requireFailsOnPostgres runs build's job once on PostgreSQL and requires
// its attempt to be recorded as failed with want (ErrUnstorableJSON,
// ErrUnstorableID), not left running because PostgreSQL refused the
// update that records it.
func requireFailsOnPostgres(t *testing.T, build BuildFunc[sumArgs], want error) {
	t.Helper()
	url, schema := pgSchema(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, mustWorker(t, newAsync(t), 5*time.Second, build))
	client := newClientIn[pgx.Tx](t, riverpgxv5.New(newPool(t, url)), schema, workers, retryNow{})
	events, cancel := client.Subscribe(river.EventKindJobFailed, river.EventKindJobCompleted, river.EventKindJobCancelled)
	defer cancel()
	res, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	select {
	case ev := <-events:
		require.Equal(t, river.EventKindJobFailed, ev.Kind)
		assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, want.Error())
	case <-time.After(30 * time.Second):
		row, err := client.JobGet(context.Background(), res.Job.ID)
		require.NoError(t, err)
		// Let the cleanup's Stop finish: cancel the wedged job's row by hand.
		_, _ = client.JobCancel(context.Background(), res.Job.ID)
		t.Fatalf("the failed attempt was never recorded: after 30 s the job is %s (attempt %d)", row.State, row.Attempt)
	}
}

// TestNulResultFailsTheNode guards Node's promise that a result that
// cannot be checkpointed fails the node, for a result whose JSON holds
// \u0000, which PostgreSQL's jsonb cannot store: on SQLite, which could
// store it, the node fails all the same, with ErrUnstorableJSON, so that a job
// behaves the same on both databases.
func TestNulResultFailsTheNode(t *testing.T) {
	events := runJob(t, 1, time.Minute, nulResult)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, rivertype.JobStateDiscarded, ev.Job.State)
	msg := ev.Job.Errors[len(ev.Job.Errors)-1].Error
	assert.Contains(t, msg, `"a" failed (durable: node "a": result cannot be checkpointed: `+ErrUnstorableJSON.Error())
	assert.NotContains(t, msg, "b is down", "b never ran: its upstream failed")
}

// TestJSONBRejects checks the scan for what jsonb refuses in encoded
// JSON: \u0000 and unpaired surrogate escapes. A NUL
// character anywhere in a string, keys included, is found; a backslash
// followed by the text u0000 is not one, nor are other escapes.
func TestJSONBRejects(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{"raw\x00bytes", true},
		{"\x00", true},
		{map[string]int{"k\x00": 1}, true},
		{[]string{"ok", "\\\x00"}, true}, // a backslash, then a NUL
		{`\u0000`, false},                // a backslash and the text u0000
		{`\\u0000`, false},
		{"\x01\u2028\t\"", false},
		{[]byte("raw\x00bytes"), false}, // base64
		{42, false},
		{"caf\U0001F600", false}, // json.Marshal writes the emoji as UTF-8
		{json.RawMessage(`"\ud83d\ude00"`), false},
		{json.RawMessage(`"\ud83d"`), true}, // a high surrogate alone
		{json.RawMessage(`"\ude00"`), true}, // a low surrogate alone
		{json.RawMessage(`"\ud83d\u0041"`), true},
		{json.RawMessage(`"\ud83dx\ude00"`), true},
		{json.RawMessage(`"\\ud83d"`), false}, // a backslash and the text ud83d
		{json.RawMessage(`"\\\u0000"`), true}, // a backslash, then a NUL
		{json.RawMessage(`{"\u0000":1}`), true},
	} {
		raw, err := json.Marshal(tc.v)
		require.NoError(t, err)
		assert.Equal(t, tc.want, jsonbRejects(raw), "%s", raw)
		_, err = checkpointJSON(tc.v)
		if tc.want {
			assert.ErrorIs(t, err, ErrUnstorableJSON, "%s", raw)
		} else {
			assert.NoError(t, err, "%s", raw)
		}
	}
}

// TestResumeRefusesANulValue guards Resume's check that a value's JSON
// holds no \u0000, which would make PostgreSQL reject the checkpoint:
// Resume refuses it, and the job stays parked.
func TestResumeRefusesANulValue(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	_, err := Resume(context.Background(), client, id, map[string]any{"s": "ok\x00"})
	require.ErrorIs(t, err, ErrUnstorableJSON)
	assert.Contains(t, err.Error(), `node "s"`)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 7})
	assert.NoError(t, err, "still parked")
}

// TestNulResultDoesNotWedgeTheJobOnPostgres is TestNulResultFailsTheNode
// on PostgreSQL, where the fault showed: the checkpoint of the failed
// attempt held "\u0000", jsonb rejected River's update that records the
// attempt, and the job stayed running until River's rescuer (an hour by
// default), which also kept the client's Stop waiting.
func TestNulResultDoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, nulResult, ErrUnstorableJSON)
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
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[int](all, "c")
			got.Store(int64(r.Value))
			return r.Value, err
		}), 0).Depend(nc, true)
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

// TestSuspendedSnoozeAndACancelElsewhere: a suspended node's snooze must
// not override another node's river.JobCancel: the job is cancelled, and
// the suspended node does not run again (helper-47: the GraphFailedError
// carried the snooze, which River obeys first).
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
// job again, as a person already decided the node (helper-47).
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

// TestLoneSurrogateDoesNotWedgeTheJobOnPostgres: jsonb refuses an
// unpaired surrogate escape as it refuses \u0000, so such a result must
// fail its node, not leave the job running (helper-47).
func TestLoneSurrogateDoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, resultThenFailure(json.RawMessage(`{"name":"caf\ud83d"}`)), ErrUnstorableJSON)
}
