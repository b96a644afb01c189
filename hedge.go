package asynctool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Hedged returns a worker that hedges w against a slow call, as "The Tail
// at Scale" and gRPC's hedging policy do: it calls w, and each time delay
// passes without a success it calls w again beside the calls still
// running, up to attempts calls in all. A call that fails starts the next
// one at once, so Hedged retries too. The first call to succeed gives the
// worker's value; the other calls' contexts are then cancelled, and the
// worker returns once they have returned, so no call outlives it. When
// every call failed it returns their errors joined, in the order they
// came. A panic in a call, or a runtime.Goexit, is that call's failure (a
// [*PanicError], [ErrGoexit]). Each call gets the worker's parameter and
// view of the run, and a context that ends with the worker's.
//
// delay 0 starts every call at once. attempts 1 calls w once, on the
// worker's goroutine, as w itself would be called; with more, each call
// runs on a goroutine of its own, which the pool's bound
// ([WithMaxWorkers]) does not count: with WithMaxWorkers(1), a hedge of
// 4 attempts and delay 0 can run w 4 times at once, and a hedged ForEach's
// calls each run items on their own goroutine. A call that ignores
// its context keeps the worker from returning; the node's own Timeout and
// the group deadline still end the node on time, as for any worker.
//
// To the node, the calls are one attempt: Begin, OnNodeStart, a
// [RetryPolicy] and the report count the hedged worker's Action, not the
// calls inside it; combine them with a RetryPolicy to retry the whole
// hedge. w is called concurrently with itself, so it must be safe for
// that. If w implements [Defaulter], the hedged worker does too.
//
// Compile rejects a node whose hedged worker, or a hedged worker it
// wraps, has a nil w ([ErrNilWorker]), fewer than one attempt or a
// negative delay ([ErrBadRetry]).
func Hedged[P, R any](w Worker[P, R], delay time.Duration, attempts int) Worker[P, R] {
	return &hedged[P, R]{w: w, delay: delay, attempts: attempts}
}

// hedged is the worker Hedged returns.
type hedged[P, R any] struct {
	w        Worker[P, R]
	delay    time.Duration
	attempts int
}

// workerProblem says what makes h unusable, for Compile (see
// checkedWorker).
func (h *hedged[P, R]) workerProblem() (string, error) {
	switch {
	case h.w == nil || isNilWorker(h.w):
		return "its Hedged worker has a nil worker", ErrNilWorker
	case h.attempts < 1:
		return fmt.Sprintf("its Hedged worker has %d attempts", h.attempts), ErrBadRetry
	case h.delay < 0:
		return fmt.Sprintf("its Hedged worker has a negative delay (%v)", h.delay), ErrBadRetry
	}
	if f, ok := h.w.(WorkerFunc[P, R]); ok && f == nil {
		return "its Hedged worker has a nil WorkerFunc", ErrNilWorker
	}
	if c, ok := h.w.(checkedWorker); ok {
		return c.workerProblem() // a Hedged of a Hedged
	}
	return "", nil
}

// staticSub is the static shape of w's sub-run when it is known, for
// reports: every call of a hedged SubPlan or ForEach has the same.
func (h *hedged[P, R]) staticSub() *Report {
	if s, ok := h.w.(staticWorker); ok {
		return s.staticSub()
	}
	return nil
}

// DefaultValue is w's, or R's zero value when w is no Defaulter: the
// value the node would report with w itself.
func (h *hedged[P, R]) DefaultValue() R {
	if d, ok := h.w.(Defaulter[R]); ok {
		return d.DefaultValue()
	}
	var zero R
	return zero
}

// call is one call's outcome.
type call[R any] struct {
	v   R
	err error
	sub *Run // the last sub-run the call started, if w runs one (see hedgeCall)
}

// hedgeCall is in the context of a hedged call, for the call's sub-run
// (a SubPlan's, SubGraph's or ForEach's) to be found by the call's
// outcome: the run shows the winning call's last sub-run as the node's,
// not the last one any call started.
type hedgeCall struct {
	// r and self are the hedged node's run and index: a sub-run started
	// inside the call's sub-run (a ForEach whose items are SubGraphs)
	// carries the token too, and must not take its place.
	r    *runState
	self int32
	sub  atomic.Pointer[Run]
}

// hedgeCallKey is the context key of a *hedgeCall.
type hedgeCallKey struct{}

// hedgeCallOf returns the hedged call of node all.self of run all.r that
// ctx is in, or nil: not one of a sub-run's nodes, which carry the
// token in their contexts too.
func hedgeCallOf(ctx context.Context, all Wrappers) *hedgeCall {
	if c, ok := ctx.Value(hedgeCallKey{}).(*hedgeCall); ok && c.r == all.r && c.self == all.self {
		return c
	}
	return nil
}

// Action runs the hedged calls.
func (h *hedged[P, R]) Action(ctx context.Context, param P, all Wrappers) (R, error) {
	if why, err := h.workerProblem(); err != nil {
		var zero R
		return zero, fmt.Errorf("%w: %s", err, why) // only if Compile was bypassed
	}
	if h.attempts == 1 {
		return h.w.Action(ctx, param, all)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every call sends its outcome once, and Action receives until every
	// call that started has sent, also after a success, so no send is
	// left blocked: done needs no room for attempts outcomes (attempts
	// may be math.MaxInt, a hedge bounded by the deadline alone).
	done := make(chan call[R])
	var wg sync.WaitGroup
	started, ended := 0, 0
	var subs *Run // a sub-run that a call that ended had started, if any
	start := func() {
		started++
		wg.Add(1)
		go h.call(ctx, param, all, done, &wg)
	}
	start()
	next := time.NewTimer(h.delay) // attempts > 1 here
	defer next.Stop()
	var errs []error
	for {
		// While a call may still start, the end of ctx stops the timer
		// from starting one (the loop then waits for the calls only).
		var tick <-chan time.Time
		var stop <-chan struct{}
		if started < h.attempts && ctx.Err() == nil {
			tick, stop = next.C, ctx.Done()
		}
		select {
		case <-stop:
		case c := <-done:
			ended++
			if c.sub != nil {
				subs = c.sub
			}
			if c.err == nil {
				cancel()
				for ; ended < started; ended++ {
					if d := <-done; d.sub != nil { // received whatever subs is
						subs = d.sub
					}
				}
				wg.Wait()
				// A winner that started no sub-run, beside calls that
				// did, leaves the node none to show: not a losing call's.
				// In a call of an outer Hedged worker of the node (a
				// Hedged of a Hedged), a winner's sub-run is the outer
				// hedge's to pick, once its other calls, whose inner
				// hedges may succeed later than this one, have returned;
				// none is shown unless the outer hedge picks another.
				switch up := hedgeCallOf(ctx, all); {
				case up != nil && c.sub != nil:
					up.sub.Store(c.sub)
				case c.sub != nil || subs != nil:
					all.r.preferSub(all.self, c.sub)
				}
				return c.v, nil
			}
			errs = append(errs, c.err)
			if started < h.attempts && ctx.Err() == nil {
				start() // a failure starts the next call at once
				next.Reset(h.delay)
			} else if ended == started {
				wg.Wait() // every call has sent, and is returning
				// A failed hedge that is a call of an outer Hedged
				// worker of the node tells the outer hedge that the call
				// started a sub-run: if another of its calls wins
				// without one, the node shows none, not this.
				if up := hedgeCallOf(ctx, all); up != nil && subs != nil {
					up.sub.Store(subs)
				}
				var zero R
				return zero, errors.Join(errs...)
			}
		case <-tick:
			if ctx.Err() != nil {
				continue // ended as the timer fired
			}
			start()
			next.Reset(h.delay)
		}
	}
}

// call makes one call of w and sends its outcome on done, also when w
// panics or calls runtime.Goexit.
func (h *hedged[P, R]) call(ctx context.Context, param P, all Wrappers, done chan<- call[R], wg *sync.WaitGroup) {
	defer wg.Done()
	var c call[R]
	tok := &hedgeCall{r: all.r, self: all.self}
	ctx = context.WithValue(ctx, hedgeCallKey{}, tok)
	normal := false
	defer func() {
		c.sub = tok.sub.Load()
		if !normal {
			if v := recover(); v != nil {
				c.err = newPanicError(v)
			} else {
				c.err = ErrGoexit
			}
		}
		done <- c
	}()
	c.v, c.err = h.w.Action(ctx, param, all)
	normal = true
}
