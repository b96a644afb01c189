package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Item behaviours of FuzzForEachLimit.
const (
	fbQuick     = iota // returns at once
	fbSleep            // sleeps up to 300µs
	fbFail             // returns an error
	fbPanic            // panics
	fbRetry            // fails its first attempt; a retry with backoff
	fbTimeout          // its own Timeout (1ms) ends it before its 5ms call
	fbCBPanic          // its Result callback panics
	fbAttemptTO        // an AttemptTimeout (1ms) ends each 5ms attempt
	fbGoexit           // ends its goroutine
	fbKinds
)

type fuzzItems struct {
	g     gauge
	calls []atomic.Int32
}

type fuzzItemsKey struct{}

// FuzzForEachLimit runs a plan of one ForEach node of random items (quick,
// sleeping, failing, panicking, retried, timed out, Goexit), with a random
// Limit, Join and Budget, on a random executor (the default pool, pools
// of 1, 2 and 4, a goroutine per task, one that runs tasks on the
// caller's goroutine), from up to 4 goroutines at once, some runs
// cancelled or given a short deadline. It checks what must hold whatever
// the timing: no run hangs; without a cancel, a deadline or an item whose
// own timeout may leave its worker running, never more than Limit items
// work at once; no item is called more often than its attempts allow;
// and with the zero Join and no cancel, every item is called, unless a
// Budget ran out first. A stress test of the Limit, made a
// fuzz target: `go test` runs its seeds, `go test -fuzz
// FuzzForEachLimit` searches further.
func FuzzForEachLimit(f *testing.F) {
	for s := range uint64(12) {
		f.Add(s, uint8(s*7), uint8(s*5), uint8(s), uint8(s*3))
	}
	f.Fuzz(func(t *testing.T, seed uint64, size, limit, mode, budget uint8) {
		rng := rand.New(rand.NewPCG(seed, uint64(size)<<8|uint64(limit)))
		n := 2 + int(size)%12
		lim := 1 + int(limit)%(n-1)
		var a *Async
		switch mode % 6 {
		case 0:
			a = New()
		case 1:
			a = New(WithMaxWorkers(1))
		case 2:
			a = New(WithMaxWorkers(2), WithTimings(true))
		case 3:
			a = New(WithExecutor(GoExecutor{}))
		case 4:
			a = New(WithExecutor(ExecutorFunc(func(f func()) error { f(); return nil })))
		case 5:
			a = New(WithMaxWorkers(4), WithHooks(&Hooks{OnNodeEnd: func(context.Context, NodeEvent) {}}))
		}
		defer a.Close()
		cancelMode := int(mode/6) % 3 // 1: Cancel after a while, 2: a short deadline
		joinKind := rng.IntN(5)
		var bud time.Duration
		if budget%3 == 0 {
			bud = time.Duration(200+int(budget)*20) * time.Microsecond
		}
		beh := make([]int, n)
		strict, plain := true, true // strict: the bound holds; plain: the zero Join may succeed
		for i := range beh {
			beh[i] = rng.IntN(2)
			if rng.IntN(3) == 0 {
				beh[i] = rng.IntN(fbKinds)
			}
			switch beh[i] {
			case fbTimeout, fbAttemptTO, fbGoexit:
				strict = false // a worker may go on after its item ended
			}
			if beh[i] == fbGoexit || beh[i] == fbCBPanic {
				plain = false
			}
		}
		fe := ForEach[int, int, int]{
			Items: func(context.Context, int, Wrappers) ([]int, error) {
				s := make([]int, n)
				for i := range s {
					s[i] = i
				}
				return s, nil
			},
			Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
				st := ctx.Value(fuzzItemsKey{}).(*fuzzItems)
				st.g.in()
				defer st.g.out()
				call := st.calls[i].Add(1)
				switch beh[i] {
				case fbSleep:
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				case fbFail:
					return 0, errors.New("fail")
				case fbPanic:
					panic("boom")
				case fbRetry:
					if call == 1 {
						return 0, errors.New("flaky")
					}
				case fbTimeout, fbAttemptTO:
					select {
					case <-ctx.Done():
						return 0, ctx.Err()
					case <-time.After(5 * time.Millisecond):
					}
				case fbGoexit:
					runtime.Goexit()
				}
				return i, nil
			}),
			Node: func(i int, _ int, w *WorkerWrapper[int, int]) {
				switch beh[i] {
				case fbRetry:
					w.Retry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(200 * time.Microsecond)})
				case fbTimeout:
					w.Timeout(time.Millisecond)
				case fbAttemptTO:
					w.Retry(RetryPolicy{Attempts: 2, AttemptTimeout: time.Millisecond})
				case fbCBPanic:
					w.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { panic("callback") }))
				}
			},
			Limit:  lim,
			Budget: bud,
		}
		switch joinKind {
		case 1:
			fe.Join = AllSucceeded()
		case 2:
			fe.Join = AnySucceeded()
		case 3:
			fe.Join = AtLeast(1 + rng.IntN(n))
		case 4:
			fe.Join = AllDone()
		}
		each := NewWrapper("each", fe, 0)
		pl, err := Compile(each)
		if err != nil {
			t.Fatal(err)
		}
		desc := fmt.Sprintf("n=%d limit=%d mode=%d cancel=%d join=%d budget=%v items=%v", n, lim, mode%6, cancelMode, joinKind, bud, beh)
		par, reps := 1+rng.IntN(4), 1+rng.IntN(4)
		var wg sync.WaitGroup
		done := make(chan struct{})
		for range par {
			wg.Go(func() {
				for range reps {
					st := &fuzzItems{calls: make([]atomic.Int32, n)}
					ctx := context.WithValue(context.Background(), fuzzItemsKey{}, st)
					var run *Run
					var err error
					switch cancelMode {
					case 1:
						run, err = a.StartPlan(ctx, pl, time.Minute)
						if err == nil {
							time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
							run.Cancel()
							_ = run.Wait(context.Background())
						}
					case 2:
						run, err = a.RunPlan(ctx, pl, time.Duration(1+rand.IntN(1000))*time.Microsecond)
					default:
						run, err = a.RunPlan(ctx, pl, time.Minute)
					}
					if run == nil {
						t.Errorf("%s: no run: %v", desc, err)
						return
					}
					res := each.ResultIn(run)
					if strict && cancelMode == 0 && int(st.g.most.Load()) > lim {
						t.Errorf("%s: %d items at once", desc, st.g.most.Load())
					}
					for i := range st.calls {
						most := int32(1)
						if beh[i] == fbRetry || beh[i] == fbAttemptTO {
							most = 2
						}
						if c := st.calls[i].Load(); c > most {
							t.Errorf("%s: item %d called %d times", desc, i, c)
						}
					}
					if joinKind == 0 && cancelMode == 0 && plain {
						if res.Err != nil {
							t.Errorf("%s: the zero Join failed: %v", desc, res.Err)
						}
						for i := range st.calls {
							if st.calls[i].Load() != 0 || bud != 0 {
								continue
							}
							if (beh[i] == fbTimeout || beh[i] == fbAttemptTO) && i < len(res.Value) &&
								res.Value[i].State == ResultTimeout && errors.Is(res.Value[i].Err, context.DeadlineExceeded) {
								// Its 1ms Timeout passed between its start and
								// its worker's call, on a loaded machine: it
								// ended as a timeout, never called.
								continue
							}
							t.Errorf("%s: item %d never called (%v, %v)", desc, i, res.Value[i].State, res.Value[i].Err)
						}
					}
					run.Release()
				}
			})
		}
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			buf := make([]byte, 1<<20)
			t.Fatalf("%s: hung\n%s", desc, buf[:runtime.Stack(buf, true)])
		}
	})
}
