package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
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

// Regression tests for the eighteenth review of the durable module.

// cents is a result type whose JSON methods have pointer receivers, as
// many hand-written ones do: encoding/json uses them only through a
// pointer (or an addressable value).
type cents struct{ n int64 }

func (c *cents) MarshalJSON() ([]byte, error) { return json.Marshal(c.n) }
func (c *cents) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &c.n) }

// TestS18PointerMarshalerRoundTrips guards Node's promise that a retry
// replays a checkpointed result instead of calling its worker again, for
// a result type whose MarshalJSON has a pointer receiver: the checkpoint
// must be encoded as Action decodes it, through a pointer. Encoded as a
// value, the result was stored as {} (its fields are unexported), did not
// decode on the retry, and the worker (a charge) ran again.
func TestS18PointerMarshalerRoundTrips(t *testing.T) {
	var charges atomic.Int32
	var got atomic.Int64
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		charge := Node(cp, "charge", asynctool.WorkerFunc[int, cents](func(context.Context, int, asynctool.Wrappers) (cents, error) {
			charges.Add(1)
			return cents{n: 500}, nil
		}), 0)
		asynctool.NewWrapper("receipt", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			if job.Attempt == 1 {
				return 0, errors.New("the mailer is down")
			}
			r, err := asynctool.ResultOf[cents](all, "charge")
			got.Store(r.Value.n)
			return 0, err
		}), 0).Depend(charge, true)
		return []asynctool.Wrapper{charge}, nil
	}
	events := runJob(t, 3, time.Minute, build)
	require.Len(t, events, 2)
	require.Equal(t, river.EventKindJobCompleted, events[1].Kind)
	assert.Equal(t, rivertype.JobStateCompleted, events[1].Job.State)
	assert.Equal(t, int32(1), charges.Load(), "the retry replays the charge")
	assert.Equal(t, int64(500), got.Load())
}

// TestS18ResumeValueWithPointerMarshaler is
// TestS18PointerMarshalerRoundTrips for a value Resume gives: Resume
// encodes it as the node's replay decodes it, through a pointer, so the
// node gets the value given instead of failing to decode {}.
func TestS18ResumeValueWithPointerMarshaler(t *testing.T) {
	var approvals atomic.Int32
	var got atomic.Int64
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		amount := Node(cp, "amount", asynctool.WorkerFunc[int, cents](func(context.Context, int, asynctool.Wrappers) (cents, error) {
			approvals.Add(1)
			return cents{}, errors.New("needs a manager")
		}), 0).OnFailure(asynctool.PolicySuspend)
		asynctool.NewWrapper("pay", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[cents](all, "amount")
			got.Store(r.Value.n)
			return 0, err
		}), 0).Depend(amount, true)
		return []asynctool.Wrapper{amount}, nil
	}
	client, id, events := runParked(t, build)
	_, err := Resume(context.Background(), client, id, map[string]any{"amount": cents{n: 700}})
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.Equal(t, int32(1), approvals.Load(), "the node was replayed with the value given")
	assert.Equal(t, int64(700), got.Load())
}

// numericCases are JSON numbers around the limits of PostgreSQL's
// numeric, each with whether jsonb refuses it (checked against
// PostgreSQL 15 by TestS18NumericRangeMatchesPostgres).
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

// TestS18NumericRange guards the check of what jsonb refuses for numbers
// out of the range of PostgreSQL's numeric, which encoding/json writes
// for a json.Number, a json.RawMessage or a *big.Int, though never for a
// float or an integer: the check finds such a number anywhere outside a
// string, and nothing in a string.
func TestS18NumericRange(t *testing.T) {
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

// TestS18NumericRangeMatchesPostgres checks numericCases against
// PostgreSQL's jsonb itself.
func TestS18NumericRangeMatchesPostgres(t *testing.T) {
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

// TestS18HugeNumberDoesNotWedgeTheJobOnPostgres: jsonb refuses a number
// out of the range of PostgreSQL's numeric as it refuses \u0000, so such
// a result must fail its node, not leave the job running until River's
// rescuer (with every job whose end the same client recorded with it).
func TestS18HugeNumberDoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, resultThenFailure(json.Number("1e200000")), ErrUnstorableJSON)
}

// TestS18ResumeRefusesAHugeNumber: Resume refuses a value that jsonb
// cannot store, and the job stays parked.
func TestS18ResumeRefusesAHugeNumber(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	_, err := Resume(context.Background(), client, id, map[string]any{"s": json.Number("1e-20000")})
	require.ErrorIs(t, err, ErrUnstorableJSON)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 7})
	assert.NoError(t, err, "still parked")
}

// TestS18CancelOutranksASnoozeElsewhere is
// TestSuspendedSnoozeAndACancelElsewhere without the suspension: one
// node asks River to cancel the job, another to snooze it. River obeys a
// snooze anywhere in the error before it looks for a cancellation, so
// the GraphFailedError must not carry the snooze beside the cancellation:
// it did, and the job was snoozed on every attempt, x's JobCancel never
// obeyed, s running again each time (a snooze consumes no attempt, so
// for ever).
func TestS18CancelOutranksASnoozeElsewhere(t *testing.T) {
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

// TestS18GraphFailedErrorUnwrap: a GraphFailedError leaves out the nodes'
// snoozes only when a node asked for a cancellation.
func TestS18GraphFailedErrorUnwrap(t *testing.T) {
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
