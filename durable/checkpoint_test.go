package durable

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
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

// TestNilCheckpointFailsTheNode checks that a node made with a nil
// *Checkpoint fails with an error that says so, where Node panicked with
// a nil dereference.
func TestNilCheckpointFailsTheNode(t *testing.T) {
	var runs atomic.Int32
	var n *asynctool.WorkerWrapper[int, int]
	require.NotPanics(t, func() { n = intNode(nil, "n", &runs, nil) })
	require.NoError(t, newAsync(t).BeginWork(context.Background(), time.Second, n))
	r := n.Result()
	assert.Equal(t, asynctool.ResultException, r.State)
	require.Error(t, r.Err)
	assert.Contains(t, r.Err.Error(), `node "n" was made with a nil *Checkpoint`)
	assert.Zero(t, runs.Load())
	assert.False(t, errors.Is(r.Err, asynctool.ErrNilWorker))
}

// TestNilCheckpointHasNothing checks that a BuildFunc called without a
// Checkpoint (by a test of the function alone) can ask it what was
// stored, as of a nil map: nothing, where Has and Replayed panicked.
func TestNilCheckpointHasNothing(t *testing.T) {
	var cp *Checkpoint
	require.NotPanics(t, func() {
		assert.False(t, cp.Has("n"))
		assert.Zero(t, cp.Replayed())
	})
}

// TestWhatAReplayShows pins two things Node's doc says of a replayed
// node. A struct result's unexported fields: JSON does not hold them, so
// the retry's replay gives them their zero values, without an error. And
// to asynctool's hooks (and so to the otel module's spans, whose
// asynctool.node.ran is an Attempt above 0) the replayed node ran once
// and succeeded, as the worker asynctool calls is Node's.
func TestWhatAReplayShows(t *testing.T) {
	type quote struct {
		Price int
		cost  int
	}
	var runs atomic.Int32
	var mu sync.Mutex
	var saw []quote
	var ends []asynctool.NodeEvent // q's OnNodeEnd, one per job attempt
	a := asynctool.New(asynctool.WithHooks(&asynctool.Hooks{OnNodeEnd: func(_ context.Context, ev asynctool.NodeEvent) {
		if ev.ID == "q" {
			mu.Lock()
			ends = append(ends, ev)
			mu.Unlock()
		}
	}}))
	t.Cleanup(func() { a.Close() })
	evs := runWorker(t, openSQLite(t), mustWorker(t, a, 5*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		q := Node(cp, "q", asynctool.WorkerFunc[int, quote](func(context.Context, int, asynctool.Wrappers) (quote, error) {
			runs.Add(1)
			return quote{Price: 5, cost: 3}, nil
		}), 0)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := q.ResultFrom(all)
			mu.Lock()
			saw = append(saw, r.Value)
			mu.Unlock()
			if job.Attempt == 1 {
				return 0, errors.New("once")
			}
			return 0, err
		}), 0).Depend(q, true)
		return []asynctool.Wrapper{q}, nil
	}), sumArgs{Base: 1}, 2)
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, int32(1), runs.Load(), "the worker ran on the first attempt only")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []quote{{Price: 5, cost: 3}, {Price: 5}}, saw)
	require.Len(t, ends, 2)
	for k, ev := range ends {
		assert.Equal(t, 1, ev.Attempt, "job attempt %d", k+1)
		assert.Equal(t, asynctool.ResultSuccess, ev.Result, "job attempt %d", k+1)
	}
}

// TestCheckpointedNodesInSubGraphs: a SubGraph's Build may make
// checkpointed nodes while the run goes on, and their ids key the job's
// one checkpoint, whereas asynctool checks ids only within each graph:
// with one id ("fetch") in two sub-graphs, the second node succeeded
// with the first one's result without calling its worker, in the first
// attempt already, and the sink read "LL" or "RR" (it now fails: see
// TestNodesSharingAnIDInTwoSubGraphsFail). Ids prefixed with the
// outer node's, as Node's doc says, keep each node's own result: each
// worker runs once, and the retry replays "L" and "R".
func TestCheckpointedNodesInSubGraphs(t *testing.T) {
	var left, right atomic.Int32
	var seen []string
	var mu sync.Mutex
	sub := func(cp *Checkpoint, outer, v string, runs *atomic.Int32) asynctool.SubGraph[int, string] {
		return asynctool.SubGraph[int, string]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[string], error) {
			f := Node(cp, outer+"/fetch", asynctool.WorkerFunc[int, string](func(context.Context, int, asynctool.Wrappers) (string, error) {
				runs.Add(1)
				return v, nil
			}), 0)
			return asynctool.Built[string]{Starts: []asynctool.Wrapper{f}, Output: func() (string, error) {
				r := f.Result()
				return r.Value, r.Err
			}}, nil
		}}
	}
	evs := runJob(t, 3, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		l := asynctool.NewWrapper("left", sub(cp, "left", "L", &left), 0)
		r := asynctool.NewWrapper("right", sub(cp, "right", "R", &right), 0)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			lv, _ := asynctool.ResultOf[string](all, "left")
			rv, _ := asynctool.ResultOf[string](all, "right")
			mu.Lock()
			seen = append(seen, lv.Value+rv.Value)
			mu.Unlock()
			if job.Attempt == 1 {
				return 0, errors.New("the sink fails the first attempt")
			}
			return 0, nil
		}), 0).Depend(l, true).Depend(r, true)
		return []asynctool.Wrapper{l, r}, nil
	})
	require.Len(t, evs, 2)
	assert.Equal(t, river.EventKindJobCompleted, evs[1].Kind)
	assert.Equal(t, []string{"LR", "LR"}, seen)
	assert.Equal(t, int32(1), left.Load(), "replayed on the retry")
	assert.Equal(t, int32(1), right.Load(), "replayed on the retry")
}

// cents is a result type whose JSON methods have pointer receivers, as
// many hand-written ones do: encoding/json uses them only through a
// pointer (or an addressable value).
type cents struct{ n int64 }

func (c *cents) MarshalJSON() ([]byte, error) { return json.Marshal(c.n) }

func (c *cents) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &c.n) }

// TestPointerMarshalerRoundTrips guards Node's promise that a retry
// replays a checkpointed result instead of calling its worker again, for
// a result type whose MarshalJSON has a pointer receiver: the checkpoint
// must be encoded as Action decodes it, through a pointer. Encoded as a
// value, the result was stored as {} (its fields are unexported), did not
// decode on the retry, and the worker (a charge) ran again.
func TestPointerMarshalerRoundTrips(t *testing.T) {
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

// TestResumeValueWithPointerMarshaler is
// TestPointerMarshalerRoundTrips for a value Resume gives: Resume
// encodes it as the node's replay decodes it, through a pointer, so the
// node gets the value given instead of failing to decode {}.
func TestResumeValueWithPointerMarshaler(t *testing.T) {
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

// runWorkerAs is runWorker for any river.Worker of sumArgs.
func runWorkerAs(t *testing.T, worker river.Worker[sumArgs], maxAttempts int) []*river.Event {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client := newClient[*sql.Tx](t, riversqlite.New(openSQLite(t)), workers)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	defer cancel()
	_, err := client.Insert(context.Background(), sumArgs{Base: 1}, &river.InsertOpts{MaxAttempts: maxAttempts})
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

// stringer is a result type that holds an interface with methods.
type stringer struct {
	Name  string
	Label fmt.Stringer
}

// tree is a recursive result type that holds an interface deep down.
type tree struct {
	Kids []*tree
	Meta map[string]any
}

// typeJob runs a job of two attempts whose checkpointed node "a" has
// result type R (its worker returns want, and counts its calls in runs)
// and whose sink b fails on the first attempt only, and returns the
// events and what b read of a's result on its last call.
func typeJob[R any](t *testing.T, want R) (evs []*river.Event, runs int32, got R) {
	t.Helper()
	var calls atomic.Int32
	var mu sync.Mutex
	build := func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		a := Node(cp, "a", asynctool.WorkerFunc[int, R](func(context.Context, int, asynctool.Wrappers) (R, error) {
			calls.Add(1)
			return want, nil
		}), 0)
		asynctool.NewWrapper("b", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, _ := asynctool.ResultOf[R](all, "a")
			mu.Lock()
			got = r.Value
			mu.Unlock()
			if job.Attempt == 1 {
				return 0, errors.New("b is down")
			}
			return 0, nil
		}), 0).Depend(a, true)
		return []asynctool.Wrapper{a}, nil
	}
	evs = runJob(t, 2, 10*time.Second, build)
	mu.Lock()
	defer mu.Unlock()
	return evs, calls.Load(), got
}

// TestResultsThatDoNotComeBackFailTheNode guards the checkpoint
// against results it cannot give back. An interface type with methods
// never decodes from JSON, so such a node fails every attempt before any
// node runs; a result that does not decode back (a struct whose field of
// an interface type with methods holds a value) fails its node as it is
// checkpointed. Before, the stored JSON did not decode on the retry, and
// the worker ran again on every attempt, its checkpoint unused.
func TestResultsThatDoNotComeBackFailTheNode(t *testing.T) {
	lastErr := func(ev *river.Event) string { return ev.Job.Errors[len(ev.Job.Errors)-1].Error }
	t.Run("error type", func(t *testing.T) {
		evs, runs, _ := typeJob[error](t, errors.New("declined"))
		require.Len(t, evs, 2)
		assert.Equal(t, rivertype.JobStateDiscarded, evs[1].Job.State)
		for _, ev := range evs {
			assert.Contains(t, lastErr(ev), `durable: node "a": result cannot be checkpointed: its JSON does not decode back into error`)
			assert.Contains(t, lastErr(ev), ErrUndecodableResult.Error())
		}
		assert.Equal(t, int32(2), runs, "the worker ran on each attempt, and its node failed each time")
	})
	t.Run("fmt.Stringer type", func(t *testing.T) {
		evs, runs, _ := typeJob[fmt.Stringer](t, time.Second)
		require.Len(t, evs, 2)
		assert.Contains(t, lastErr(evs[0]), ErrUndecodableResult.Error())
		assert.Equal(t, int32(2), runs)
	})
	t.Run("field holding a Stringer", func(t *testing.T) {
		evs, runs, _ := typeJob(t, &stringer{Name: "x", Label: time.Second})
		require.Len(t, evs, 2)
		assert.Equal(t, rivertype.JobStateDiscarded, evs[1].Job.State)
		for _, ev := range evs {
			assert.Contains(t, lastErr(ev), `durable: node "a": result cannot be checkpointed: its JSON does not decode back into *durable.stringer`)
		}
		assert.Equal(t, int32(2), runs, "the worker ran on each attempt, and its node failed each time")
	})
}

// TestResultsThatComeBackAreReplayed checks what the checkpoint
// gives back, and that the worker is not called again for it: results
// with interfaces that decode (an any, a map[string]any, a nil field of
// an interface type with methods) come back with JSON's own types, as
// encoding/json gives them; types that decode themselves come back as
// they decode.
func TestResultsThatComeBackAreReplayed(t *testing.T) {
	replayed := func(t *testing.T, runs int32, evs []*river.Event) {
		t.Helper()
		require.Len(t, evs, 2)
		require.Equal(t, river.EventKindJobCompleted, evs[1].Kind, "errors: %v", evs[1].Job.Errors)
		assert.Equal(t, int32(1), runs, "the retry replayed the checkpoint")
	}
	t.Run("any", func(t *testing.T) {
		evs, runs, got := typeJob[any](t, 42)
		replayed(t, runs, evs)
		assert.Equal(t, float64(42), got, "JSON's own type for a number")
	})
	t.Run("map of any", func(t *testing.T) {
		evs, runs, got := typeJob(t, map[string]any{"n": "one", "ok": true})
		replayed(t, runs, evs)
		assert.Equal(t, map[string]any{"n": "one", "ok": true}, got)
	})
	t.Run("recursive", func(t *testing.T) {
		want := tree{Kids: []*tree{{Meta: map[string]any{"k": "v"}}}}
		evs, runs, got := typeJob(t, want)
		replayed(t, runs, evs)
		assert.Equal(t, want, got)
	})
	t.Run("nil field of an interface type", func(t *testing.T) {
		evs, runs, got := typeJob(t, stringer{Name: "x"})
		replayed(t, runs, evs)
		assert.Equal(t, stringer{Name: "x"}, got)
	})
	t.Run("self decoding", func(t *testing.T) {
		evs, runs, got := typeJob(t, selfDecoding{v: "x"})
		replayed(t, runs, evs)
		assert.Equal(t, selfDecoding{v: "x"}, got)
	})
}

// selfDecoding holds an interface but encodes and decodes itself.
type selfDecoding struct{ v any }

func (s selfDecoding) MarshalJSON() ([]byte, error) { return json.Marshal(s.v) }

func (s *selfDecoding) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.v) }

// optionalPrice decodes JSON null itself, as no price: a type that
// cannot be nil, but whose UnmarshalJSON makes its own value of null.
type optionalPrice struct {
	Cents int
	Known bool
}

func (p optionalPrice) MarshalJSON() ([]byte, error) {
	if !p.Known {
		return []byte("null"), nil
	}
	return json.Marshal(p.Cents)
}

func (p *optionalPrice) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*p = optionalPrice{}
		return nil
	}
	p.Known = true
	return json.Unmarshal(b, &p.Cents)
}

// TestNilValueForANodeThatDecodesNull: a nil value is a value for a node
// whose result type decodes JSON null itself, though the type cannot be
// nil (see ErrNilValue): Resume takes it, and the node replays what the
// type's UnmarshalJSON makes of null.
func TestNilValueForANodeThatDecodesNull(t *testing.T) {
	var s atomic.Int32
	var known, read atomic.Bool
	client, id, events := runParked(t, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		ns := Node(cp, "s", asynctool.WorkerFunc[int, optionalPrice](func(context.Context, int, asynctool.Wrappers) (optionalPrice, error) {
			s.Add(1)
			return optionalPrice{}, errors.New("needs a price")
		}), 0).OnFailure(asynctool.PolicySuspend)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			r, err := asynctool.ResultOf[optionalPrice](all, "s")
			known.Store(r.Value.Known)
			read.Store(true)
			return 0, err
		}), 0).Depend(ns, true)
		return []asynctool.Wrapper{ns}, nil
	})
	_, err := Resume(context.Background(), client, id, map[string]any{"s": nil})
	require.NoError(t, err, "null is an optionalPrice")
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.True(t, read.Load())
	assert.False(t, known.Load(), "the sink read no price")
	assert.Equal(t, int32(1), s.Load(), "s's worker did not run again")
}

// TestResumeRefusesNilForANodeThatCannotBeNil guards Resume against
// a nil value for a node whose result type cannot be nil (an int): stored
// as JSON null, it decoded into the int as 0, and the sink went on with a
// value nobody gave, where asynctool.SucceedWith(nil) is an error within
// one process. The graph that parked the job knows which nodes cannot be
// nil, so Resume refuses such a value at once, with ErrNilValue, and
// writes nothing: the job stays parked, and a real value resumes it.
func TestResumeRefusesNilForANodeThatCannotBeNil(t *testing.T) {
	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, events := parkApproval(t, &a, &s, &approved, &got)
	ctx := context.Background()
	for _, v := range []any{nil, (*int)(nil), []int(nil)} {
		_, err := Resume(ctx, client, id, map[string]any{"s": v})
		require.ErrorIs(t, err, ErrNilValue, "%#v", v)
		assert.ErrorContains(t, err, `the value of node "s" is nil, and its result type cannot be nil`)
	}
	// A value that is not nil but is JSON null passes Resume, which cannot
	// know it; the replay, which knows s is an int, refuses it, and the
	// job parks again.
	_, err := Resume(ctx, client, id, map[string]any{"s": json.RawMessage("null")})
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, ErrNilValue.Error())
	assert.Zero(t, got.Load(), "the sink did not read the zero value")

	_, err = Resume(ctx, client, id, map[string]any{"s": 7})
	require.NoError(t, err, "still parked")
	ev = untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.Equal(t, int64(7), got.Load())
	assert.Equal(t, int32(1), s.Load())
}

// nilGraph builds gate (failing on the second attempt) → s
// (checkpointed, PolicySuspend, failing; its result type a *int on the
// first attempt and R after it, as after a deployment that changed it) →
// sink, which calls read.
func nilGraph[R any](s *atomic.Int32, read func(all asynctool.Wrappers) error) BuildFunc[sumArgs] {
	return func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		gate := asynctool.NewWrapper("gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if job.Attempt == 2 {
				return 0, errors.New("gate: transient")
			}
			return 0, nil
		}), 0)
		var ns asynctool.Wrapper
		if job.Attempt == 1 {
			ns = Node(cp, "s", asynctool.WorkerFunc[int, *int](func(context.Context, int, asynctool.Wrappers) (*int, error) {
				s.Add(1)
				return nil, errors.New("needs approval")
			}), 0).Depend(gate, true).OnFailure(asynctool.PolicySuspend)
		} else {
			ns = Node(cp, "s", asynctool.WorkerFunc[int, R](func(context.Context, int, asynctool.Wrappers) (R, error) {
				s.Add(1)
				var zero R
				return zero, errors.New("needs approval")
			}), 0).Depend(gate, true).OnFailure(asynctool.PolicySuspend)
		}
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(_ context.Context, _ int, all asynctool.Wrappers) (int, error) {
			return 0, read(all)
		}), 0).Depend(ns, true)
		return []asynctool.Wrapper{gate}, nil
	}
}

// TestNilValueForANodeThatCannotBeNil guards the replay of a nil
// value Resume gave, where the node's result type is known: Resume took
// nil for s, a *int in the graph that parked the job, but later
// attempts' s is an int. JSON null decoded into the int as 0, and the
// sink read 0; now s fails with ErrNilValue (parking the job again, as it
// is under PolicySuspend) and its worker does not run. The value stays
// nil through an attempt that fails before s (the gate) and through a
// Resume without values, until a Resume gives s a value.
func TestNilValueForANodeThatCannotBeNil(t *testing.T) {
	var s atomic.Int32
	var reads atomic.Int32
	var got atomic.Int64
	client, id, events := runParked(t, nilGraph[int](&s, func(all asynctool.Wrappers) error {
		reads.Add(1)
		r, err := asynctool.ResultOf[int](all, "s")
		got.Store(int64(r.Value))
		return err
	}))
	want := fmt.Sprintf(`durable: node "s": the value Resume gave is null, and int cannot be nil: %v`, ErrNilValue)
	_, err := Resume(context.Background(), client, id, map[string]any{"s": nil})
	require.NoError(t, err, "a *int can be nil")
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	require.Equal(t, 3, ev.Job.Attempt, "the second attempt failed at the gate")
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, want)

	_, err = Resume(context.Background(), client, id, nil)
	require.NoError(t, err)
	ev = untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind, "parked again")
	assert.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, want)
	assert.Zero(t, reads.Load(), "the sink did not run")
	assert.Equal(t, int32(1), s.Load(), "s's worker did not run again")

	_, err = Resume(context.Background(), client, id, map[string]any{"s": 5})
	require.NoError(t, err)
	ev = untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.Equal(t, int64(5), got.Load())
	assert.Equal(t, int32(1), s.Load())
}

// TestNilValueForAPointerNode checks that a nil value is a value for
// a node whose result type can be nil: the node replays nil.
func TestNilValueForAPointerNode(t *testing.T) {
	var s atomic.Int32
	var isNil atomic.Bool
	client, id, events := runParked(t, nilGraph[*int](&s, func(all asynctool.Wrappers) error {
		r, err := asynctool.ResultOf[*int](all, "s")
		isNil.Store(r.Value == nil)
		return err
	}))
	_, err := Resume(context.Background(), client, id, map[string]any{"s": nil})
	require.NoError(t, err)
	ev := untilParkedOrDone(t, events)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "errors: %v", ev.Job.Errors)
	assert.True(t, isNil.Load())
	assert.Equal(t, int32(1), s.Load())
}

// TestSubGraphNodeKeptWhileItsSubGraphDoesNotRun: a SubGraph's Build
// makes its checkpointed nodes only when the SubGraph node runs. Attempt
// 1 runs the sub-graph, whose "sg/charge" succeeds, and fails at the
// sink; attempt 2 fails at "gate", upstream of the SubGraph, which does
// not run; attempt 3 runs it again. The charge must be replayed on
// attempt 3: attempt 2's checkpoint dropped it, as the result of a node
// the graph no longer had, and the charge ran twice.
func TestSubGraphNodeKeptWhileItsSubGraphDoesNotRun(t *testing.T) {
	var charges, gates atomic.Int32
	evs := runJob(t, 4, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		gate := asynctool.NewWrapper("gate", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			gates.Add(1)
			if job.Attempt == 2 {
				return 0, errors.New("the gate is closed on attempt 2")
			}
			return 1, nil
		}), 0)
		sg := asynctool.NewWrapper("sg", asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			c := intNode(cp, "sg/charge", &charges, nil)
			return asynctool.Built[int]{Starts: []asynctool.Wrapper{c}, Output: func() (int, error) {
				r := c.Result()
				return r.Value, r.Err
			}}, nil
		}}, 0).Depend(gate, true)
		asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if job.Attempt == 1 {
				return 0, errors.New("the sink fails attempt 1")
			}
			return 0, nil
		}), 0).Depend(sg, true)
		return []asynctool.Wrapper{gate}, nil
	})
	require.Len(t, evs, 3)
	assert.Equal(t, river.EventKindJobCompleted, evs[2].Kind)
	assert.Equal(t, int32(3), gates.Load())
	assert.Equal(t, int32(1), charges.Load(), "attempt 3 replays the charge attempt 1 checkpointed")
}

// TestSubGraphNodesTheGraphLostAreDropped bounds what
// TestSubGraphNodeKeptWhileItsSubGraphDoesNotRun keeps, as
// TestCheckpointDropsNodesTheGraphLost does for the graph's own nodes:
// attempt 2's "sg" builds "sg/a" but no longer "sg/b", and its graph has
// no "sg2" at all, so its checkpoint drops "sg/b" and "sg2/c", which
// run again when attempt 3 brings them back.
func TestSubGraphNodesTheGraphLostAreDropped(t *testing.T) {
	var a, b, c atomic.Int32
	runs := map[string]*atomic.Int32{"sg/a": &a, "sg/b": &b, "sg2/c": &c}
	// sub is a SubGraph whose Build makes a checkpointed node per id.
	sub := func(cp *Checkpoint, ids ...string) asynctool.SubGraph[int, int] {
		return asynctool.SubGraph[int, int]{Build: func(context.Context, int, asynctool.Wrappers) (asynctool.Built[int], error) {
			var starts []asynctool.Wrapper
			for _, id := range ids {
				starts = append(starts, intNode(cp, id, runs[id], nil))
			}
			return asynctool.Built[int]{Starts: starts, Output: func() (int, error) { return 0, nil }}, nil
		}}
	}
	evs := runJob(t, 4, 10*time.Second, func(ctx context.Context, job *river.Job[sumArgs], cp *Checkpoint) ([]asynctool.Wrapper, error) {
		sink := asynctool.NewWrapper("sink", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			if job.Attempt < 3 {
				return 0, errors.New("the sink fails attempts 1 and 2")
			}
			return 0, nil
		}), 0)
		if job.Attempt == 2 {
			sg := asynctool.NewWrapper("sg", sub(cp, "sg/a"), 0)
			sink.Depend(sg, true)
			return []asynctool.Wrapper{sg}, nil
		}
		sg := asynctool.NewWrapper("sg", sub(cp, "sg/a", "sg/b"), 0)
		sg2 := asynctool.NewWrapper("sg2", sub(cp, "sg2/c"), 0)
		sink.Depend(sg, true).Depend(sg2, true)
		return []asynctool.Wrapper{sg, sg2}, nil
	})
	require.Len(t, evs, 3)
	assert.Equal(t, river.EventKindJobCompleted, evs[2].Kind)
	assert.Equal(t, int32(1), a.Load(), "sg/a was replayed in attempts 2 and 3")
	assert.Equal(t, int32(2), b.Load(), "sg/b ran in attempts 1 and 3: attempt 2's sg no longer made it")
	assert.Equal(t, int32(2), c.Load(), "sg2/c ran in attempts 1 and 3: attempt 2's graph had no sg2")
}

// TestZeroCheckpoint: a BuildFunc called by a test with a Checkpoint of
// its own (&Checkpoint{}) rather than nil makes nodes that run as they
// would on a first attempt. The zero Checkpoint had no map for this
// attempt's results, and a node that succeeded panicked storing its
// result there.
func TestZeroCheckpoint(t *testing.T) {
	var runs atomic.Int32
	cp := &Checkpoint{}
	n := intNode(cp, "n", &runs, nil)
	require.NoError(t, newAsync(t).BeginWork(context.Background(), time.Second, n))
	r := n.Result()
	require.NoError(t, r.Err)
	assert.Equal(t, asynctool.ResultSuccess, r.State)
	assert.Equal(t, 1, r.Value)
	assert.Equal(t, int32(1), runs.Load())
	assert.False(t, cp.Has("n"), "nothing from an earlier attempt")
	assert.Zero(t, cp.Replayed())
}
