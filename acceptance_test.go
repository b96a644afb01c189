package asynctool_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scenarios of asyncTool's own tests (serial chains, parallel groups,
// must/optional mixes, group timeouts, short-circuited branches, results
// passed by id), written against the public API only, as a user would.

// sleeper is asyncTool's ParWorker: it sleeps, then returns "result of
// <param>", and is its own callback, logging what it saw.
type sleeper struct {
	d   time.Duration
	log *eventLog
}

func (s sleeper) Action(ctx context.Context, p string, _ asynctool.Wrappers) (string, error) {
	select {
	case <-time.After(s.d):
		return "result of " + p, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (s sleeper) DefaultValue() string { return "default" }

func (s sleeper) Begin() { s.log.add("begin") }

func (s sleeper) Result(success bool, p string, r asynctool.WorkResult[string]) {
	s.log.add(fmt.Sprintf("%s:%v:%v:%s", p, success, r.State, r.Value))
}

type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(e string) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }

func (l *eventLog) has(e string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.ev {
		if x == e {
			return true
		}
	}
	return false
}

func node(id string, d time.Duration, log *eventLog) *asynctool.WorkerWrapper[string, string] {
	w := sleeper{d, log}
	return asynctool.NewWrapper(id, asynctool.Worker[string, string](w), id).Callback(w)
}

func TestAcceptanceSerialChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		a, b, c := node("0", 100*time.Millisecond, log), node("1", 200*time.Millisecond, log), node("2", 300*time.Millisecond, log)
		a.Next(b, true)
		b.Next(c, true)
		as := asynctool.New()
		defer as.Close()
		start := time.Now()
		require.NoError(t, as.BeginWork(context.Background(), time.Second, a))
		assert.Equal(t, 600*time.Millisecond, time.Since(start), "0 -> 1 -> 2 run one after another")
		assert.Equal(t, "result of 2", c.Result().Value)
		assert.True(t, log.has("2:true:success:result of 2"))
	})
}

func TestAcceptanceParallelGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		a, b, c := node("0", 1000*time.Millisecond, log), node("1", 2000*time.Millisecond, log), node("2", 1000*time.Millisecond, log)
		as := asynctool.New()
		defer as.Close()
		start := time.Now()
		require.NoError(t, as.BeginWork(context.Background(), 3*time.Second, a, b, c))
		assert.Equal(t, 2*time.Second, time.Since(start), "0, 1, 2 in parallel")
	})
}

func TestAcceptanceMustAndOptional(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 0 -> (1 must, 2 optional) -> 3: 3 waits for 1 only.
		log := &eventLog{}
		n0, n1, n2, n3 := node("0", 100*time.Millisecond, log), node("1", 200*time.Millisecond, log),
			node("2", 2000*time.Millisecond, log), node("3", 100*time.Millisecond, log)
		n1.Depend(n0, true)
		n2.Depend(n0, true)
		n3.Depend(n1, true).Depend(n2, false)
		as := asynctool.New()
		defer as.Close()
		r, err := as.Start(context.Background(), 5*time.Second, n0)
		require.NoError(t, err)
		time.Sleep(450 * time.Millisecond)
		assert.Equal(t, asynctool.StateFinish, n3.State(), "3 ran without waiting for the optional 2")
		assert.Equal(t, asynctool.StateWorking, n2.State())
		require.NoError(t, r.Wait(context.Background()))
		assert.Equal(t, "result of 2", n2.Result().Value, "a started optional branch completes")
	})
}

func TestAcceptanceGroupTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &eventLog{}
		n0, n1 := node("0", 100*time.Millisecond, log), node("1", 3*time.Second, log)
		n2 := node("2", 100*time.Millisecond, log).Depend(n1, true)
		as := asynctool.New()
		defer as.Close()
		start := time.Now()
		err := as.BeginWork(context.Background(), time.Second, n0, n1)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, asynctool.WorkResult[string]{Value: "result of 0", State: asynctool.ResultSuccess}, n0.Result())
		for _, w := range []*asynctool.WorkerWrapper[string, string]{n1, n2} {
			assert.Equal(t, asynctool.ResultTimeout, w.Result().State, w.ID())
			assert.Equal(t, "default", w.Result().Value, w.ID())
			assert.True(t, log.has(w.ID()+":false:timeout:default"), w.ID())
		}
	})
}

func TestAcceptanceShortCircuit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// any(a, b -> c, d -> e -> f) -> g with a fast: the unstarted rest is skipped.
		log := &eventLog{}
		a := node("a", 10*time.Millisecond, log)
		b, d := node("b", time.Second, log), node("d", time.Second, log)
		c := node("c", time.Second, log).Depend(b, true)
		e := node("e", time.Second, log).Depend(d, true)
		f := node("f", time.Second, log).Depend(e, true)
		g := node("g", 10*time.Millisecond, log).Depend(a, false).Depend(c, false).Depend(f, false)
		as := asynctool.New()
		defer as.Close()
		require.NoError(t, as.BeginWork(context.Background(), 5*time.Second, a, b, d))
		assert.Equal(t, "result of g", g.Result().Value)
		for _, w := range []*asynctool.WorkerWrapper[string, string]{c, e, f} {
			assert.ErrorIs(t, w.Result().Err, asynctool.ErrSkipped, w.ID())
			assert.Equal(t, "default", w.Result().Value, w.ID())
		}
	})
}

func TestAcceptanceResultsByID(t *testing.T) {
	log := &eventLog{}
	first := node("first", 0, log)
	second := asynctool.NewWrapper("second", asynctool.WorkerFunc[string, string](
		func(ctx context.Context, p string, all asynctool.Wrappers) (string, error) {
			r, err := asynctool.ResultOf[string](all, "first")
			if err != nil {
				return "", err
			}
			return r.Value + " then " + p, nil
		}), "second").Depend(first, true)
	// The one-liner, without Close: the Async's idle workers exit
	// on their own, which goleak in TestMain checks.
	require.NoError(t, asynctool.New(asynctool.WithMaxWorkers(64)).BeginWork(context.Background(), 10*time.Second, first))
	assert.Equal(t, "result of first then second", second.Result().Value)
}

// TestDefaultAsyncDoesNotCapBlockingWorkAtTheCPUCount is issue 5's
// "blocking work must never be capped at the CPU count by default": 100
// nodes that each block for a second, between a source and a sink, take
// one second with the default Async, whatever GOMAXPROCS is. A pool of
// GOMAXPROCS goroutines would take 100 / GOMAXPROCS seconds. It holds for
// graphs built per request, on their first runs and once their node ids
// have a history, and for a plan, before and after its timed runs.
func TestDefaultAsyncDoesNotCapBlockingWorkAtTheCPUCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := asynctool.New()
		defer a.Close()
		quick := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
			return 0, nil
		})
		blocking := asynctool.WorkerFunc[int, int](func(ctx context.Context, k int, _ asynctool.Wrappers) (int, error) {
			select {
			case <-time.After(time.Second):
				return k, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
		var sink *asynctool.WorkerWrapper[int, int]
		build := func() asynctool.Wrapper {
			src := asynctool.NewWrapper("source", quick, 0)
			sink = asynctool.NewWrapper("sink", quick, 0)
			for k := range 100 {
				w := asynctool.NewWrapper(fmt.Sprintf("rpc%d", k), blocking, k).Depend(src, true)
				sink.Depend(w, true)
			}
			return src
		}
		for k := range 6 {
			start := time.Now()
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, build()))
			assert.Equal(t, time.Second, time.Since(start), "single-use run %d", k)
			assert.Equal(t, asynctool.StateFinish, sink.State())
		}
		pl, err := asynctool.Compile(build())
		require.NoError(t, err)
		for k := range 70 { // past the plan's first timed runs and its 64th
			start := time.Now()
			r, err := a.RunPlan(context.Background(), pl, time.Minute)
			require.NoError(t, err)
			assert.Equal(t, time.Second, time.Since(start), "run %d of the plan", k)
			r.Release()
		}
	})
}
