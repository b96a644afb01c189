package durable

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/riverqueue/river"
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
