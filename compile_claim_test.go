package asynctool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedWrapper is a start node whose first core call, made by compile
// before it claims the node, runs gate: a test's way to stop a
// compilation between two claims.
type gatedWrapper struct {
	*WorkerWrapper[int, int]
	once sync.Once
	gate func()
}

func (g *gatedWrapper) core() *nodeCore {
	g.once.Do(g.gate)
	return g.WorkerWrapper.core()
}

// TestGatedWrapperGatesOnce: the gate runs on the first core call only,
// and the wrapper stands for its node.
func TestGatedWrapperGatesOnce(t *testing.T) {
	calls := 0
	w := NewWrapper("w", okWorker(), 0)
	g := &gatedWrapper{WorkerWrapper: w, gate: func() { calls++ }}
	assert.Same(t, &w.nodeCore, coreOf(g))
	assert.Same(t, &w.nodeCore, coreOf(g))
	assert.Equal(t, 1, calls, "gate calls")
}

// startRacers runs one Start per order of start nodes, all at once, and
// returns each call's run and error.
func startRacers(a *Async, orders ...[]Wrapper) ([]*Run, []error) {
	runs, errs := make([]*Run, len(orders)), make([]error, len(orders))
	var wg, ready sync.WaitGroup
	ready.Add(len(orders))
	for k, order := range orders {
		wg.Go(func() {
			ready.Done()
			ready.Wait()
			runs[k], errs[k] = a.Start(context.Background(), 0, order...)
		})
	}
	wg.Wait()
	return runs, errs
}

// TestStartRacersStartsEveryCall: startRacers makes every call and
// returns each one's run and error in the order of the calls.
func TestStartRacersStartsEveryCall(t *testing.T) {
	a := New()
	defer a.Close()
	x, y := NewWrapper("x", okWorker(), 0), NewWrapper("y", okWorker(), 0)
	runs, errs := startRacers(a, []Wrapper{x}, []Wrapper{y}, []Wrapper{nil})
	require.Len(t, runs, 3)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], ErrNilWrapper)
	require.NoError(t, runs[0].Wait(context.Background()))
	require.NoError(t, runs[1].Wait(context.Background()))
	assert.Equal(t, StateFinish, x.State())
	assert.Equal(t, StateFinish, y.State())
}

// requireOneRan checks that exactly one of the racing calls started a
// run, which it waits for, and that the others were refused with
// ErrReused.
func requireOneRan(t *testing.T, runs []*Run, errs []error) {
	t.Helper()
	ran := 0
	for k := range runs {
		if errs[k] != nil {
			require.ErrorIs(t, errs[k], ErrReused, "call %d", k)
			continue
		}
		ran++
		require.NoError(t, runs[k].Wait(context.Background()))
	}
	require.Equal(t, 1, ran, "runs started, of %d calls racing for one graph (errors: %v)", len(runs), errors.Join(errs...))
}

// holdInAFailingStart starts, on a goroutine of its own, a Start of x
// that is refused (for a nil start node) and returns once that Start holds
// x: it waits at a gate until open is closed, then sends its error on
// failed.
func holdInAFailingStart(a *Async, x Wrapper) (open chan struct{}, failed chan error) {
	inGate := make(chan struct{})
	open, failed = make(chan struct{}), make(chan error)
	gated := &gatedWrapper{WorkerWrapper: NewWrapper("g", okWorker(), 0), gate: func() {
		close(inGate)
		<-open
	}}
	go func() {
		_, err := a.Start(context.Background(), 0, x, gated, nil)
		failed <- err
	}()
	<-inGate
	return open, failed
}

// TestStartWaitsForAClaimThatFails: a Start whose graph is refused
// (here for a nil start node) holds the nodes it claimed until it
// returns. A Start of the same nodes at that moment used to be refused
// at once with ErrReused, "already used in a run", though no run used
// them; it must wait until the other lets go of them, and run them.
func TestStartWaitsForAClaimThatFails(t *testing.T) {
	a := New()
	defer a.Close()
	x := NewWrapper("x", okWorker(), 0)
	y := NewWrapper("y", okWorker(), 0).Depend(x, true)
	open, failed := holdInAFailingStart(a, x)
	type result struct {
		run *Run
		err error
	}
	started := make(chan result)
	go func() {
		r, err := a.Start(context.Background(), 0, x)
		started <- result{r, err}
	}()
	var got result
	select {
	case got = <-started: // refused while the other held x
		close(open)
	case <-time.After(100 * time.Millisecond):
		close(open)
		got = <-started
	}
	require.ErrorIs(t, <-failed, ErrNilWrapper)
	require.NoError(t, got.err, "Start of nodes claimed by a Start that failed")
	require.NoError(t, got.run.Wait(context.Background()))
	assert.Equal(t, StateFinish, y.State())
}

// TestDescribeWaitsForAClaimThatFails: Describe of nodes that a Start
// holds while it is refused said they were "part of a run"; it waits
// until the Start lets go of them, and describes them.
func TestDescribeWaitsForAClaimThatFails(t *testing.T) {
	a := New()
	defer a.Close()
	x := NewWrapper("x", okWorker(), 0)
	NewWrapper("y", okWorker(), 0).Depend(x, true)
	open, failed := holdInAFailingStart(a, x)
	type result struct {
		rep *Report
		err error
	}
	described := make(chan result)
	go func() {
		rep, err := Describe(x)
		described <- result{rep, err}
	}()
	var got result
	select {
	case got = <-described: // refused while the other held x
		close(open)
	case <-time.After(100 * time.Millisecond):
		close(open)
		got = <-described
	}
	require.ErrorIs(t, <-failed, ErrNilWrapper)
	require.NoError(t, got.err, "Describe of nodes claimed by a Start that failed")
	assert.Len(t, got.rep.Nodes, 2)
}

// TestConcurrentStartsThatMeetEachOthersClaims: two Start calls for one
// single-use graph each claim a start node, then meet the other's claim.
// One of them runs the graph and the other is refused with ErrReused:
// one yields its claims to the other, whichever ranks lower, and neither
// waits for the other for ever.
func TestConcurrentStartsThatMeetEachOthersClaims(t *testing.T) {
	for range 20 {
		a := New()
		x := NewWrapper("x", okWorker(), 0)
		y := NewWrapper("y", okWorker(), 0)
		NewWrapper("z", okWorker(), 0).Depend(x, true).Depend(y, true)
		// Each call claims its first start node, then waits at its
		// second until the other has claimed its own first.
		var claimed sync.WaitGroup
		claimed.Add(2)
		meet := func() { claimed.Done(); claimed.Wait() }
		runs, errs := startRacers(a,
			[]Wrapper{x, &gatedWrapper{WorkerWrapper: y, gate: meet}},
			[]Wrapper{y, &gatedWrapper{WorkerWrapper: x, gate: meet}})
		requireOneRan(t, runs, errs)
		assert.Equal(t, StateFinish, x.State())
		assert.Equal(t, StateFinish, y.State())
		a.Close()
	}
}

// TestConcurrentStartsOfOneGraphRunItOnce: two Start calls race for a
// single-use graph of many start nodes, passed in opposite orders, so
// that each claims a part of it before it meets the other's claims.
// Exactly one runs it, whatever the interleaving, and none waits for
// ever.
func TestConcurrentStartsOfOneGraphRunItOnce(t *testing.T) {
	a := New()
	defer a.Close()
	const nodes = 4096
	rounds := 30
	if raceEnabled {
		rounds = 6
	}
	for round := range rounds {
		starts := make([]Wrapper, nodes)
		for i := range starts {
			starts[i] = NewWrapper("", okWorker(), 0)
		}
		backwards := slices.Clone(starts)
		slices.Reverse(backwards)
		runs, errs := startRacers(a, starts, backwards)
		requireOneRan(t, runs, errs)
		for _, s := range starts {
			require.Equal(t, StateFinish, s.State(), "round %d: a node did not run", round)
		}
	}
}
