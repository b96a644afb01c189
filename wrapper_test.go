package asynctool

import (
	"context"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type defaulting struct{}

func (defaulting) Action(context.Context, int, Wrappers) (string, error) { return "", errBoom }
func (defaulting) DefaultValue() string                                  { return "from worker" }

// TestDefaultValues checks the precedence: Default, then Defaulter, then
// the zero value.
func TestDefaultValues(t *testing.T) {
	a := newAsync(t)
	viaWorker := NewWrapper[int, string]("w", defaulting{}, 0)
	viaWrapper := NewWrapper[int, string]("x", defaulting{}, 0).Default("from wrapper")
	zero := NewWrapper("z", WorkerFunc[int, string](func(context.Context, int, Wrappers) (string, error) { return "ignored", errBoom }), 0)
	require.NoError(t, a.BeginWork(context.Background(), 0, viaWorker, viaWrapper, zero))
	assert.Equal(t, "from worker", viaWorker.Result().Value)
	assert.Equal(t, "from wrapper", viaWrapper.Result().Value)
	assert.Equal(t, "", zero.Result().Value, "a failed worker's return value is not kept")
}

// TestResultOf checks the run view's typed access.
func TestResultOf(t *testing.T) {
	a := newAsync(t)
	type user struct{ Name string }
	u := NewWrapper("user", WorkerFunc[int64, *user](func(context.Context, int64, Wrappers) (*user, error) {
		return &user{"ada"}, nil
	}), 7)
	var unknownErr, typeErr error
	var early WorkResult[int]
	slow := NewWrapper("slow", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
	page := NewWrapper("page", WorkerFunc[int64, string](func(ctx context.Context, uid int64, all Wrappers) (string, error) {
		_, unknownErr = ResultOf[int](all, "nope")
		_, typeErr = ResultOf[string](all, "user")
		early, _ = ResultOf[int](all, "later")
		st, ok := all.State("user")
		if !ok || st != StateFinish {
			t.Errorf("State(user) = %v, %v; want finish, true", st, ok)
		}
		r, err := ResultOf[*user](all, "user")
		if err != nil {
			return "", err
		}
		return r.Value.Name, nil
	}), 7).Depend(u, true).Depend(slow, false)
	NewWrapper("later", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0).Depend(page, true)
	require.NoError(t, a.BeginWork(context.Background(), 0, u, slow))
	assert.Equal(t, "ada", page.Result().Value)
	assert.ErrorIs(t, unknownErr, ErrUnknownID)
	assert.ErrorContains(t, unknownErr, `"nope"`)
	assert.ErrorIs(t, typeErr, ErrResultType)
	assert.ErrorContains(t, typeErr, `node "user" produces *asynctool.user, not string`)
	assert.Equal(t, WorkResult[int]{}, early, "a node that has not ended reads as default")

	_, err := ResultOf[int](Wrappers{}, "x")
	assert.ErrorIs(t, err, ErrUnknownID, "the zero view is empty")
	_, ok := Wrappers{}.State("x")
	assert.False(t, ok)
}

func TestWrapperBeforeRun(t *testing.T) {
	w := NewWrapper("w", okWorker(), 0)
	assert.Equal(t, "w", w.ID())
	assert.Equal(t, StateInit, w.State())
	assert.Equal(t, WorkResult[int]{}, w.Result())
	assert.Equal(t, `node "w"`, w.String())
	var nilW *WorkerWrapper[int, int]
	assert.Equal(t, StateInit, nilW.State())
	// String was the one reading method that panicked on a nil w (a
	// variable never assigned, logged with %s by a caller's own code).
	assert.NotPanics(t, func() { assert.Equal(t, "node <nil>", nilW.String()) })
}

func TestStrings(t *testing.T) {
	assert.Equal(t, []string{"init", "working", "finish", "error", "State(9)"},
		[]string{StateInit.String(), StateWorking.String(), StateFinish.String(), StateError.String(), State(9).String()})
	assert.Equal(t, []string{"default", "success", "timeout", "exception", "ResultState(7)"},
		[]string{ResultDefault.String(), ResultSuccess.String(), ResultTimeout.String(), ResultException.String(), ResultState(7).String()})
	assert.Equal(t, StateInit, publicState(sReady))
	assert.Equal(t, StateWorking, publicState(sEnding))
}

func TestErrorTexts(t *testing.T) {
	up := &UpstreamError{ID: "a", Err: errBoom}
	assert.Equal(t, `asynctool: upstream "a" failed: boom`, up.Error())
	assert.ErrorIs(t, up, errBoom)
	pe := &PanicError{Value: "x"}
	assert.Equal(t, "asynctool: panic: x", pe.Error())
	assert.NoError(t, pe.Unwrap())
	cpe := &CallbackPanicError{ID: "n", Method: "Result", Panic: pe}
	assert.Equal(t, `asynctool: callback Result of node "n" panicked: x`, cpe.Error())
	assert.ErrorIs(t, cpe, pe)
}

func TestCallbackAdapters(t *testing.T) {
	var got WorkResult[int]
	cb := ResultFunc[int, int](func(_ bool, _ int, r WorkResult[int]) { got = r })
	cb.Begin()
	cb.Result(true, 0, WorkResult[int]{Value: 3})
	assert.Equal(t, 3, got.Value)
	NopCallback[int, int]{}.Begin()
	NopCallback[int, int]{}.Result(true, 0, WorkResult[int]{})
}

// TestWrapperSize guards the size of a wrapper, the bulk of what building a
// graph allocates: with word-sized parameter and result types it fits the
// allocator's 208-byte size class. A field added to nodeCore or
// WorkerWrapper moves it to the next class (224), and building a graph
// pays for the bytes in allocation and collection.
func TestWrapperSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(WorkerWrapper[int32, int64]{}), uintptr(208))
	assert.LessOrEqual(t, unsafe.Sizeof(WorkerWrapper[*int, *int]{}), uintptr(208))
}

// TestPlanNodeSize guards the size of a plan node: one cache line, which
// a run reads for every node, and 64 bytes a node of what compiling a
// graph allocates.
func TestPlanNodeSize(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(pnode{}))
}

// TestBuildAllocatesOneObjectPerNode guards the size of the edge lists: a
// node allocates only its wrapper as long as it has at most two
// successors, however many upstreams it has (a downstream node keeps only
// a count of its edges).
func TestBuildAllocatesOneObjectPerNode(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	w := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, nil })
	const n = 200
	nodes := make([]*WorkerWrapper[int, int], n)
	allocs := testing.AllocsPerRun(20, func() {
		for k := range nodes {
			nodes[k] = NewWrapper("", w, k)
			for d := max(0, k-2); d < k; d++ { // two upstreams, two successors
				nodes[k].Depend(nodes[d], true)
			}
		}
	})
	assert.Equal(t, float64(n), allocs)
}

// TestZeroWrapperIsAnError: a zero WorkerWrapper (not made with
// NewWrapper) made BeginWork panic inside compile, which then left the
// valid nodes it had claimed claimed.
func TestZeroWrapperIsAnError(t *testing.T) {
	a := newAsync(t)
	var w WorkerWrapper[int, int]
	var err error
	require.NotPanics(t, func() { err = a.BeginWork(context.Background(), time.Second, &w) })
	require.ErrorIs(t, err, ErrNilWorker)
	assert.Contains(t, err.Error(), "NewWrapper")

	one := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil })
	up := NewWrapper("up", one, 0)
	var down WorkerWrapper[int, int]
	down.Depend(up, true)
	require.NotPanics(t, func() { err = a.BeginWork(context.Background(), time.Second, up) })
	require.ErrorIs(t, err, ErrNilWorker)
	require.NotPanics(t, func() { _, err = Compile(up) })
	require.ErrorIs(t, err, ErrNilWorker, "up was released by the failed BeginWork, not left claimed")
	_, err = Describe(up)
	require.ErrorIs(t, err, ErrNilWorker)
	assert.NotPanics(t, func() { _, _, _ = w.Result(), w.State(), w.String() })
}

// TestResultSeenEndedHoldsTheValue reads a node's Result from another
// goroutine while the run goes on, as Result allows: once it shows the
// node succeeded it holds the worker's value, which is written before
// the node's final state is published. (Publishing the state first
// showed ResultSuccess with the zero value for a moment, and is a data
// race under -race.)
func TestResultSeenEndedHoldsTheValue(t *testing.T) {
	a := newAsync(t)
	for range 50 {
		x := NewWrapper("x", WorkerFunc[int, int](func(_ context.Context, p int, _ Wrappers) (int, error) { return p, nil }), 42)
		run, err := a.Start(context.Background(), 0, x)
		require.NoError(t, err)
		res := x.Result()
		for res.State == ResultDefault {
			runtime.Gosched()
			res = x.Result()
		}
		require.Equal(t, ResultSuccess, res.State)
		require.Equal(t, 42, res.Value)
		require.NoError(t, run.Wait(context.Background()))
	}
}
