package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync"
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

// notUTF8 is a result whose JSON holds a byte that is not UTF-8: 0xe9,
// "é" in Latin-1. encoding/json keeps a json.RawMessage's bytes as they
// are, and so decodes them back, but PostgreSQL refuses them in any text,
// jsonb included.
var notUTF8 = json.RawMessage("{\"name\":\"caf\xe9\"}")

// TestNotUTF8DoesNotWedgeTheJobOnPostgres: PostgreSQL refused River's
// update that records the attempt, whose checkpoint held notUTF8, and the
// job stayed running until River's rescuer (and the client's Stop waited
// for it), as with \u0000 (TestNulResultDoesNotWedgeTheJobOnPostgres).
func TestNotUTF8DoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, resultThenFailure(notUTF8), ErrUnstorableJSON)
}

// TestNotUTF8FailsTheNode: on SQLite, which stores such bytes, the
// node fails all the same, with ErrUnstorableJSON, and Resume refuses
// such a value, so that a job behaves the same on both databases.
func TestNotUTF8FailsTheNode(t *testing.T) {
	_, err := checkpointJSON(notUTF8)
	require.ErrorIs(t, err, ErrUnstorableJSON)

	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": json.RawMessage("\"\xff\"")})
	require.ErrorIs(t, err, ErrUnstorableJSON)
	assert.Contains(t, err.Error(), `node "s"`)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 7})
	assert.NoError(t, err, "still parked")
}

// TestUnstorableIDInASubGraphFailsTheNode is
// TestUnstorableIDInASubGraphOnPostgres on SQLite, which could store the id:
// the node fails all the same, so that a job behaves the same on both
// databases, and its worker does not run.
func TestUnstorableIDInASubGraphFailsTheNode(t *testing.T) {
	var runs atomic.Int32
	evs := runJob(t, 1, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		return []asynctool.Wrapper{asynctool.NewWrapper("sub", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			f := intNode(cp, "fetch\xff", &runs, nil)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{f}, Output: func() (int, error) {
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0)}, nil
	})
	require.Len(t, evs, 1)
	assert.Equal(t, rivertype.JobStateDiscarded, evs[0].Job.State)
	assert.Contains(t, evs[0].Job.Errors[0].Error, ErrUnstorableID.Error())
	assert.Zero(t, runs.Load())
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
		// The bounds of the surrogate ranges: \ud800-\udbff high,
		// \udc00-\udfff low.
		{json.RawMessage(`"\udc00"`), true}, // the first low surrogate, alone
		{json.RawMessage(`"\udfff"`), true}, // the last low surrogate, alone
		{json.RawMessage(`"\ud800\udc00"`), false},
		{json.RawMessage(`"\udbff\udfff"`), false},
		{json.RawMessage(`"\ud7ff\ue000"`), false}, // just outside both ranges
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

// TestLoneSurrogateDoesNotWedgeTheJobOnPostgres: jsonb refuses an
// unpaired surrogate escape as it refuses \u0000, so such a result must
// fail its node, not leave the job running.
func TestLoneSurrogateDoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, resultThenFailure(json.RawMessage(`{"name":"caf\ud83d"}`)), ErrUnstorableJSON)
}

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
	client := testClient(t, riversqlite.New(openSQLite(t)), &river.Config{
		ErrorHandler: handler,
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:      workers,
	})
	startClient(t, client)
	events, cancel := client.Subscribe(river.EventKindJobFailed)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	ev := waitFor(t, events, 1)[0]
	rec := ev.Job.Errors[len(ev.Job.Errors)-1]
	assert.Equal(t, "bad\uFFFDinput", rec.Error)
	assert.Contains(t, rec.Trace, "storable_test.go", "the trace shows the BuildFunc's panic")
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

// numericCases are JSON numbers around the limits of PostgreSQL's
// numeric, each with whether jsonb refuses it (checked against
// PostgreSQL 15 by TestNumericRangeMatchesPostgres).
var numericCases = []struct {
	num  string
	over bool
}{
	{"0", false},
	{"-0", false},
	{"1.7976931348623157e+308", false}, // the largest float64
	{"5e-324", false},                  // the smallest
	{"-9223372036854775808", false},
	{"1e131071", false},
	{"1e131072", true},
	{"-1E131072", true},
	{"1e+131072", true},
	{"10e131070", false},
	{"10e131071", true},
	{"0.1e131072", false},
	{"0.1e131073", true},
	{"1" + strings.Repeat("0", 131071), false},
	{"1" + strings.Repeat("0", 131072), true},
	{"1e200000", true},
	{"1e-16383", false},
	{"1e-16384", true},
	{"1.5e-16382", false},
	{"1.5e-16383", true},
	{"0.00012e-16378", false},
	{"0.00012e-16379", true},
	{"0." + strings.Repeat("0", 16383), false},
	{"0." + strings.Repeat("0", 16384), true},
	{"0e-16383", false},
	{"0e-16384", true},
	{"0e1073741822", false},
	{"0e1073741823", true},
	{"1." + strings.Repeat("0", 16383) + "e131071", false},
	{"1e99999999999999999999999", true},
}

// TestNumericRange guards the check of what jsonb refuses for numbers
// out of the range of PostgreSQL's numeric, which encoding/json writes
// for a json.Number, a json.RawMessage or a *big.Int, though never for a
// float or an integer: the check finds such a number anywhere outside a
// string, and nothing in a string.
func TestNumericRange(t *testing.T) {
	for _, tc := range numericCases {
		assert.Equal(t, tc.over, numericOverflows(tc.num), "%.40s", tc.num)
		for _, v := range []any{json.Number(tc.num), []any{1, map[string]any{"k": json.Number(tc.num)}}} {
			raw, err := json.Marshal(v)
			require.NoError(t, err)
			assert.Equal(t, tc.over, jsonbRejects(raw), "%.40s", raw)
		}
		raw, err := json.Marshal(tc.num) // a string
		require.NoError(t, err)
		assert.False(t, jsonbRejects(raw), "%.40s", raw)
	}
	huge := new(big.Int).Exp(big.NewInt(10), big.NewInt(131072), nil)
	_, err := checkpointJSON(huge)
	assert.ErrorIs(t, err, ErrUnstorableJSON, "a *big.Int of 131073 digits")
	_, err = checkpointJSON(map[string]any{"max": math.MaxFloat64, "min": math.SmallestNonzeroFloat64, "u": uint64(math.MaxUint64), "s": "1e200000"})
	assert.NoError(t, err)
}

// TestNumericRangeMatchesPostgres checks numericCases against
// PostgreSQL's jsonb itself.
func TestNumericRangeMatchesPostgres(t *testing.T) {
	url, _ := pgSchema(t)
	pool := newPool(t, url)
	for _, tc := range numericCases {
		var n int
		err := pool.QueryRow(context.Background(), "SELECT length($1::text::jsonb::text)", "["+tc.num+"]").Scan(&n)
		if tc.over {
			assert.ErrorContains(t, err, "value overflows numeric format", "%.40s", tc.num)
		} else {
			assert.NoError(t, err, "%.40s", tc.num)
		}
	}
}

// TestHugeNumberDoesNotWedgeTheJobOnPostgres: jsonb refuses a number
// out of the range of PostgreSQL's numeric as it refuses \u0000, so such
// a result must fail its node, not leave the job running until River's
// rescuer (with every job whose end the same client recorded with it).
func TestHugeNumberDoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, resultThenFailure(json.Number("1e200000")), ErrUnstorableJSON)
}

// TestResumeRefusesAHugeNumber: Resume refuses a value that jsonb
// cannot store, and the job stays parked.
func TestResumeRefusesAHugeNumber(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	_, err := Resume(context.Background(), client, id, map[string]any{"s": json.Number("1e-20000")})
	require.ErrorIs(t, err, ErrUnstorableJSON)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 7})
	assert.NoError(t, err, "still parked")
}

// TestNotUTF8StringFailsTheNode: encoding/json writes U+FFFD for each
// byte of a string that is not UTF-8, so a result whose string held
// "caf\xe9" (Latin-1) was checkpointed as "caf\uFFFD" and a retry
// replayed that, another value than the worker's, without an error. Such
// a result now fails its node with ErrUnstorableJSON, as the package's
// doc says of bytes that are not UTF-8, wherever the string is (a field,
// a map's key, a slice's item), and Resume refuses such a value; a
// string that holds U+FFFD itself, and a []byte (base64), are fine.
func TestNotUTF8StringFailsTheNode(t *testing.T) {
	type named struct {
		Name   string
		hidden string
		Skip   string `json:"-"`
	}
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{"caf\xe9", true},
		{named{Name: "caf\xe9"}, true},
		{&named{Name: "caf\xe9"}, true},
		{map[string]int{"caf\xe9": 1}, true},
		{[]any{"ok", []string{"caf\xe9"}}, true},
		{map[string]any{"k": named{Name: "caf\xe9"}}, true},
		{[]asynctool.WorkResult[string]{{Value: "ok"}, {Value: "caf\xe9"}}, true},
		{asynctool.WorkResult[named]{Value: named{Name: "caf\xe9"}}, true},
		{asynctool.WorkResult[string]{Value: "café", Err: errors.New("caf\xe9")}, false},
		{"caf\uFFFD", false},
		{named{Name: "café", hidden: "caf\xe9", Skip: "caf\xe9"}, false},
		{[]byte("caf\xe9"), false},
		{(*named)(nil), false},
	} {
		_, err := checkpointJSON(tc.v)
		if tc.want {
			assert.ErrorIs(t, err, ErrUnstorableJSON, "%#v", tc.v)
		} else {
			assert.NoError(t, err, "%#v", tc.v)
		}
	}

	var mu sync.Mutex
	var seen []string
	evs := runJob(t, 2, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		name := Node(cp, "name", asynctool.WorkerFunc[int, string](func(context.Context, int, asynctool.Wrappers) (string, error) {
			return "caf\xe9", nil
		}), 0)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := name.ResultFrom(all)
			mu.Lock()
			seen = append(seen, r.Value)
			mu.Unlock()
			if job.Attempt == 1 {
				return 0, errors.New("the sink fails attempt 1")
			}
			return 0, err
		}), 0).Depend(name, true)
		return []asynctool.Wrapper{name}, nil
	})
	mu.Lock()
	defer mu.Unlock()
	for _, v := range seen {
		assert.Equal(t, "caf\xe9", v, "the sink saw another value than the worker returned")
	}
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	assert.Equal(t, rivertype.JobStateDiscarded, last.Job.State)
	assert.Contains(t, last.Job.Errors[len(last.Job.Errors)-1].Error, ErrUnstorableJSON.Error())

	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	_, err := Resume(context.Background(), client, id, map[string]any{"s": "caf\xe9"})
	require.ErrorIs(t, err, ErrUnstorableJSON)
}
