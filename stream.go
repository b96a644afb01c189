package asynctool

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool/internal/mpsc"
)

// StreamFunc is the work of one [Stream] node: it receives the result of
// the node before it (the stream's initial value, for the first node) and
// returns its own. ctx is the context passed to [Stream.Run].
type StreamFunc[T any] func(ctx context.Context, prev T) (T, error)

// Stream is an append-only chain of nodes that run one after another,
// each receiving its predecessor's result. Nodes can be appended from any
// goroutine while the stream runs; an unbounded stream has a start but no
// end until [Stream.Close].
//
// [Stream.Run] executes the chain on the goroutine that calls it. Appends
// do not take a lock: each links its node to an intake with one
// compare-and-swap, and Run takes everything linked so far in one swap,
// so appends from many goroutines join the chain in batches. Nodes run in
// the order their Append calls took effect.
//
// A node fails when its function returns an error or panics (its error is
// then a [*PanicError]), after its retries, if it has a [StreamRetry]
// option: as with a graph node's [RetryPolicy], a node counts as failed
// only once its last attempt did. What the failure does is the node's
// [FailurePolicy], given to [Stream.AppendWith] ([Stream.Append] means
// [PolicyFail]), except for a function that calls runtime.Goexit, which
// ends Run's goroutine: the node fails with [ErrGoexit], without retries,
// and the stream stops as under PolicyFail (Run does not return; Close
// returns ErrGoexit).
//
//   - [PolicyFail] stops the stream: Run returns the node's error, and
//     every node after it, including nodes appended later, ends without
//     running, with an error that wraps [ErrStreamStopped] and the cause.
//   - [PolicyContinue] records the failure on the node (its Wait returns
//     the error) and carries on: the next node receives the last
//     successful result before the failed node (the initial value if
//     there is none), as if the failed node had not been appended.
//   - [PolicyEnd] stops the stream like PolicyFail, but Run returns a
//     [*StreamEndError] naming the node's position, and the nodes after
//     it end with an error that wraps [ErrStreamStopped] and that
//     StreamEndError.
//   - [PolicySuspend] pauses the stream at the node, which stays pending
//     (it has not ended; its [StreamNode.Suspended] channel is closed).
//     Later nodes wait, and appends are still accepted. [Stream.Resume]
//     decides: [Rerun] runs the node again, [SucceedWith] ends it with a
//     value and the stream goes on, [FailWith] fails it as PolicyFail
//     does. If Run's context ends first, the stream stops as below.
//
// When Run's context ends the stream stops too: Run returns
// context.Cause(ctx), nodes that did not run end with an error
// wrapping [ErrStreamStopped] and the cause, and a node waiting for its
// next attempt ends with an error that wraps its last failure and the
// cause.
//
// Every node appended ends exactly once, with a result or an error: a
// node AppendWith refuses ends at once, the others as Run runs them, and
// the nodes Run did not run as it returns (one appended later ends at
// once). Until Run is called they wait: Close alone ends none, as it
// waits for Run.
//
// A Stream lives in memory only: its nodes, pending ones included, end
// with the process (the durable module persists graphs, not streams).
//
// A Stream is safe for concurrent use. It must be created with
// [NewStream] and must not be copied after first use. The zero Stream,
// and a nil *Stream, run nothing: their nodes end at once, and Run and
// Close return at once, with an error saying so (Resume finds nothing
// suspended).
type Stream[T any] struct {
	initial  T
	intake   mpsc.Queue[*StreamNode[T]]
	wake     chan struct{} // capacity 1: the intake became non-empty
	started  atomic.Bool
	closing  atomic.Bool   // Close was called
	finished chan struct{} // closed when Run has returned

	// paused is the stream's current suspension, nil when it is not
	// paused. Resume and Run (when ctx ends) race to swap it to nil; the
	// winner decides how the pending node ends.
	paused atomic.Pointer[streamPause[T]]

	// Written by Run before it seals the intake and closes finished.
	err     error // what Run returned
	lateErr error // the error of nodes appended after the end

	closeOnce sync.Once
}

// StreamNode is the handle of one appended node: its result, once it has
// ended. Its methods are safe to call from any goroutine, concurrently
// with each other and with the stream's Run.
type StreamNode[T any] struct {
	fn StreamFunc[T]
	streamNodeConfig
	attempts atomic.Int32 // times fn was called
	// policy is the node's FailurePolicy, which AppendWith checked: a byte,
	// so that it, close and attempts share one word and the retry policy
	// did not make the node bigger.
	policy    uint8
	close     bool                          // Close's marker, not a user node
	suspended atomic.Pointer[chan struct{}] // PolicySuspend only: closed when the node pauses
	done      chan struct{}
	val       T
	err       error
}

// StreamNodeOption configures one node appended with
// [Stream.AppendWith]. A nil StreamNodeOption does nothing.
type StreamNodeOption interface {
	applyStreamNode(*streamNodeConfig)
}

// streamNodeConfig is what StreamNodeOptions set, held in the node
// itself so that applying them allocates nothing.
type streamNodeConfig struct {
	retry *RetryPolicy // nil: one attempt
}

type streamRetry struct{ p *RetryPolicy }

func (o streamRetry) applyStreamNode(c *streamNodeConfig) { c.retry = o.p }

// StreamRetry gives a stream node the retries a graph node gets from
// [WorkerWrapper.Retry], with the same [RetryPolicy]: when the node's
// function fails, it is called again, after p.Backoff's delay, with the
// same input, until it succeeds or p.Attempts calls have been made; only
// then does the node fail, and its [FailurePolicy] apply, with the last
// attempt's error and value. An error p.Retryable refuses (by default one
// that is or wraps a [*PanicError] or [ErrGoexit], as [RetryPolicy]
// says) is not retried; a panic in Retryable or Backoff ends the
// retries and becomes the node's error (a [*PanicError], wrapped with the
// failed attempt's error), and a node that calls runtime.Goexit is not
// retried (it stops the stream, as it does without retries: see [Stream]).
// A runtime.Goexit in Retryable or Backoff ends Run's goroutine too: the
// node fails with an error wrapping [ErrGoexit] and the failed attempt's
// error, whatever its policy, and the stream stops with that error, as
// under PolicyFail. The backoff waits on Run's goroutine and ends early
// when Run's context does, and a retry never starts, nor a backoff sleeps,
// past that context's deadline: the failure policy applies at once
// instead. A [Rerun] of a suspended node starts a new round of p.Attempts
// attempts. p is copied: the option may be given to many nodes, and costs
// them no allocation. With p.AttemptTimeout, each call's context ends at
// the earlier of the call's start plus AttemptTimeout and the end of Run's
// context, and a call that returns after its own bound passed fails with
// an [*AttemptTimeoutError] (ID empty) and the zero value, unless it
// panicked; Run's goroutine waits for a function that ignores its context,
// so the next attempt starts only once it has returned. A node with
// p.Attempts < 1 or a negative p.AttemptTimeout ends at once with an error
// wrapping [ErrBadRetry].
func StreamRetry(p RetryPolicy) StreamNodeOption {
	return streamRetry{&p}
}

// streamPause is one suspension of a stream, at node.
type streamPause[T any] struct {
	node    *StreamNode[T]
	resumed chan streamResume[T] // capacity 1: sent once, by the Resume that won
}

type streamResume[T any] struct {
	how Resumption
	val T // how's value, for SucceedWith
}

// StreamEndError is what [Stream.Run] returns when a node appended with
// [PolicyEnd] fails; the nodes after it end with an error that wraps
// [ErrStreamStopped] and this error.
type StreamEndError struct {
	// Position is the node's place in the stream: 1 for the first node
	// Run started, and so on.
	Position int
	// Err is the node's error.
	Err error
}

func (e *StreamEndError) Error() string {
	return fmt.Sprintf("asynctool: stream ended by node %d: %v", e.Position, e.Err)
}

// Unwrap returns the node's error.
func (e *StreamEndError) Unwrap() error { return e.Err }

// NewStream returns an empty stream whose first node will receive
// initial.
func NewStream[T any](initial T) *Stream[T] {
	return &Stream[T]{
		initial:  initial,
		wake:     make(chan struct{}, 1),
		finished: make(chan struct{}),
	}
}

// Append adds a node that runs fn after every node appended before it,
// with [PolicyFail]: if it fails, the stream stops. It is
// AppendWith(fn, PolicyFail).
func (s *Stream[T]) Append(fn StreamFunc[T]) *StreamNode[T] {
	return s.AppendWith(fn, PolicyFail)
}

// AppendWith adds a node that runs fn after every node appended before
// it; p says what the node's failure does to the stream (see [Stream];
// 0 means PolicyFail), and opts configure the node ([StreamRetry]). The
// node's configuration is fixed before it joins the stream, so it cannot
// race with Run. AppendWith never blocks and never fails: a node appended
// after Close ends at once with [ErrStreamClosed], one appended after the
// stream stopped (a failure, or the end of Run's context) ends at once
// with an error wrapping [ErrStreamStopped], a node with an unknown
// policy or a bad retry policy ends at once with an error wrapping
// [ErrBadPolicy] or [ErrBadRetry], and a nil fn
// gives a node that fails with [ErrNilTask], without retries, when its
// turn comes.
func (s *Stream[T]) AppendWith(fn StreamFunc[T], p FailurePolicy, opts ...StreamNodeOption) *StreamNode[T] {
	n := &StreamNode[T]{fn: fn, done: make(chan struct{})}
	var zero T
	switch p {
	case 0, PolicyFail, PolicyContinue, PolicyEnd:
	case PolicySuspend:
		ch := make(chan struct{})
		n.suspended.Store(&ch)
	default:
		n.end(zero, fmt.Errorf("%w: stream node with unknown failure policy %v", ErrBadPolicy, p))
		return n
	}
	n.policy = uint8(p)
	for _, o := range opts {
		if o != nil {
			o.applyStreamNode(&n.streamNodeConfig)
		}
	}
	if n.retry != nil {
		if bad := n.retry.problem(); bad != "" {
			n.end(zero, fmt.Errorf("%w: stream node: %s", ErrBadRetry, bad))
			return n
		}
	}
	if s == nil || s.finished == nil {
		n.end(zero, errZeroStream)
		return n
	}
	if s.closing.Load() {
		n.end(zero, ErrStreamClosed)
		return n
	}
	s.push(n)
	return n
}

// errZeroStream is the error of a zero Stream's nodes, Run and Close, and
// a nil *Stream's: it has no channels for Run to wait on and to report
// its end.
var errZeroStream = errors.New("asynctool: Stream not made with NewStream")

func (s *Stream[T]) push(n *StreamNode[T]) {
	wasEmpty, ok := s.intake.Push(n)
	if !ok {
		var zero T
		n.end(zero, s.lateErr)
		return
	}
	if wasEmpty {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Run executes the stream's nodes in order on the calling goroutine,
// waiting for more when it has run every node appended so far, until one
// of these ends it:
//
//   - [Stream.Close]: Run runs every node appended before Close and
//     returns nil (failures under [PolicyContinue] do not count);
//   - a node with [PolicyFail] fails (or is resumed with [FailWith]): Run
//     returns the node's error;
//   - a node with [PolicyEnd] fails: Run returns a [*StreamEndError];
//   - ctx ends: Run returns context.Cause(ctx) without starting another
//     node, or another attempt of one (a running node sees ctx end and
//     should return). A node suspended, or waiting for its next attempt,
//     at that moment ends with an error that wraps its own failure and
//     the cause. A running node that returns an error as ctx ends (its
//     ctx.Err(), say) has failed like any other: its policy applies, so
//     under PolicyFail Run returns that error, which is ctx.Err() and not
//     the cause if the node returned ctx.Err(). Unless its [StreamRetry]
//     retries that error (it may after a cancel; no retry is made past
//     ctx's deadline): the node then waits for its next attempt as ctx
//     ends, so it ends as above, and Run returns the cause.
//
// When Close's end and ctx's end come together, with every node appended
// before Close run, either may decide: Run returns nil or the cause. (As
// its last node before Close ends, Run finds Close's mark before it looks
// at ctx, and returns nil; idle, it takes whichever wakes it first.)
//
// While the stream is paused at a suspended node, or a node waits for
// its next attempt, Run waits on its goroutine, without spinning, for
// [Stream.Resume], the backoff, or the end of ctx.
// Nodes that did not run end with an error, so that no node waits
// forever. Run may be called only once; later calls return
// [ErrStreamStarted]. A nil ctx is [ErrNilContext], and does not count as
// the call.
func (s *Stream[T]) Run(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext // before started: a later Run with a context may still run it
	}
	if s == nil || s.finished == nil {
		return errZeroStream
	}
	if !s.started.CompareAndSwap(false, true) {
		return ErrStreamStarted
	}
	var (
		batch []*StreamNode[T]
		i     int // next node of batch to run
		ended bool
		pos   int // user nodes started so far
		// asking is the failure, and askedV the value, of the attempt
		// of batch[i] that its retry policy is being asked about (in
		// retryDecision); asking is nil when it is not.
		asking error
		askedV T
		// waiting is the failure of batch[i] while the node waits for
		// its next attempt or is suspended; nil when it does not.
		waiting error
		// calling: Run's goroutine is in the function of batch[i].
		calling bool
	)
	defer func() {
		if !ended {
			if calling || asking != nil {
				// The function of node batch[i] called runtime.Goexit
				// on Run's goroutine, or its retry policy did, asked
				// about the node's failure (as for a panic there, the
				// node's error then wraps that failure too). The node
				// has failed, and its failure stops the stream.
				var cause error = ErrGoexit
				var v T
				if asking != nil {
					cause, v = &policyPanic{attempt: asking}, askedV
				}
				batch[i].end(v, cause)
				s.end(batch[i+1:], fmt.Errorf("%w: %w", ErrStreamStopped, cause), cause)
			} else {
				// Run's goroutine ended outside any node (in a method of
				// ctx, say): no node ran into it, and batch may have no
				// node i. The nodes left are stopped.
				cause := errors.New("asynctool: the stream's Run ended outside any node (runtime.Goexit, or a panic)")
				if waiting != nil {
					// Node batch[i] had failed and waited for its next
					// attempt, or was suspended: it ends with its
					// failure, as when ctx ends then, and a later
					// Resume finds nothing to resume.
					s.paused.Store(nil)
					var zero T
					batch[i].end(zero, fmt.Errorf("%w; the stream's Run ended before the node's next attempt or resumption: %w", waiting, cause))
					i++
				}
				s.end(batch[i:], fmt.Errorf("%w: %w", ErrStreamStopped, cause), cause)
			}
		}
		close(s.finished)
	}()
	stop := func(rest []*StreamNode[T], cause error) error {
		ended = true
		return s.end(rest, fmt.Errorf("%w: %w", ErrStreamStopped, cause), cause)
	}
	prev := s.initial
	for {
		batch, i = s.intake.TakeAll(batch[:0]), 0
		if len(batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return stop(nil, context.Cause(ctx))
			}
		}
		for ; i < len(batch); i++ {
			n := batch[i]
			if n.close {
				close(n.done)
				ended = true
				return s.end(batch[i+1:], ErrStreamClosed, nil)
			}
			pos++
			policy := FailurePolicy(n.policy)
			var (
				v     T
				err   error
				round int // attempts since the node started, or was rerun
			)
			for {
				if ctx.Err() != nil {
					cause := context.Cause(ctx)
					if round > 0 {
						// Between two attempts: the node has failed.
						var zero T
						n.end(zero, fmt.Errorf("%w; stream stopped before the node's next attempt: %w", err, cause))
						return stop(batch[i+1:], cause)
					}
					return stop(batch[i:], cause)
				}
				round++
				calling = true
				v, err = runNode(ctx, n, prev)
				calling = false
				if err == nil {
					break
				}
				if rp := n.retry; rp != nil && n.fn != nil && round < rp.Attempts {
					asking, askedV = err, v
					again, delay, perr := retryDecision(rp, err, round)
					asking = nil
					if perr != nil {
						err = &policyPanic{attempt: err, panic: perr} // the policy itself failed: no retry
					} else if again {
						waiting = err
						again = backoff(ctx, delay)
						waiting = nil
						if again {
							continue
						}
					}
				}
				if policy != PolicySuspend {
					break
				}
				waiting = err
				r, cause := s.pause(ctx, n)
				waiting = nil
				if cause != nil {
					var zero T
					n.end(zero, fmt.Errorf("%w; stream stopped while the node was suspended: %w", err, cause))
					return stop(batch[i+1:], cause)
				}
				if r.how.kind != resumeRerun {
					// SucceedWith (err is nil) or FailWith (fail-stop).
					v, err, policy = r.val, r.how.err, PolicyFail
					break
				}
				round = 0 // a Rerun starts a new round of attempts
			}
			n.end(v, err)
			batch[i] = nil
			switch {
			case err == nil:
				prev = v
			case policy == PolicyContinue:
				// prev stays the last successful result.
			case policy == PolicyEnd:
				return stop(batch[i+1:], &StreamEndError{Position: pos, Err: err})
			default:
				return stop(batch[i+1:], err)
			}
		}
	}
}

// pause suspends the stream at n until Resume or the end of ctx, and
// returns the resumption, or the cause when ctx ended first.
func (s *Stream[T]) pause(ctx context.Context, n *StreamNode[T]) (streamResume[T], error) {
	p := &streamPause[T]{node: n, resumed: make(chan streamResume[T], 1)}
	// Take the node's channel before publishing the pause: from Store on,
	// a Resume(Rerun()) may swap in the channel of the next pause, and
	// closing that one instead would leave this one open (its waiters
	// hang) and report a pause that never happened. Resume stores the new
	// channel before it sends on p.resumed, so a pause after a Rerun
	// loads the new one.
	ch := *n.suspended.Load()
	s.paused.Store(p)
	close(ch)
	select {
	case r := <-p.resumed:
		return r, nil
	case <-ctx.Done():
		if s.paused.CompareAndSwap(p, nil) {
			return streamResume[T]{}, context.Cause(ctx)
		}
		return <-p.resumed, nil // a Resume won the race; its send is under way
	}
}

// Resume resumes the stream paused at a node appended with
// [PolicySuspend], as how says: [Rerun] runs the node again, with a new
// round of its [StreamRetry] attempts (if it fails again, it pauses
// again), [SucceedWith] ends it with a value, which must be a T, and the
// stream goes on, and [FailWith] ends it with an error and stops the
// stream as [PolicyFail] does. It returns nil once the resumption is
// accepted; Run applies it (a node to be rerun ends without running if
// Run's context ends meanwhile, as the nodes after it do: with the zero
// value and an error wrapping [ErrStreamStopped] and the cause, not its
// earlier failure). It returns an error wrapping
// [ErrNotPending] when the stream is not paused (never paused, already
// resumed, or stopped because Run's context ended first: when Resume races
// with the end of the context, exactly one of them decides), or wrapping
// [ErrResultType] for a SucceedWith value that is not a T. A FailWith(nil)
// or zero Resumption is refused with an error too. Resume is safe for
// concurrent use; of concurrent calls, at most one succeeds.
func (s *Stream[T]) Resume(how Resumption) error {
	r := streamResume[T]{how: how}
	switch how.kind {
	case resumeRerun:
	case resumeSucceed:
		v, ok := how.value.(T)
		if !ok && !(how.value == nil && nilable[T]()) {
			return fmt.Errorf("%w: stream Resume: got %T, want %v", ErrResultType, how.value, reflect.TypeFor[T]())
		}
		r.val = v
	case resumeFail:
		if how.err == nil {
			return errors.New("asynctool: stream Resume: FailWith(nil)")
		}
	default:
		return errors.New("asynctool: stream Resume: " + zeroResumption)
	}
	if s == nil {
		return fmt.Errorf("%w: the stream is nil", ErrNotPending)
	}
	p := s.paused.Load()
	if p == nil || !s.paused.CompareAndSwap(p, nil) {
		return fmt.Errorf("%w: the stream is not suspended", ErrNotPending)
	}
	if how.kind == resumeRerun {
		ch := make(chan struct{}) // the node may pause again
		p.node.suspended.Store(&ch)
	}
	p.resumed <- r
	return nil
}

// end finishes the stream: it records runErr, seals the intake and ends
// rest and every node still in the intake with nodeErr.
func (s *Stream[T]) end(rest []*StreamNode[T], nodeErr, runErr error) error {
	s.err = runErr
	s.lateErr = nodeErr
	var zero T
	for _, n := range s.intake.Seal(rest) {
		if n.close {
			close(n.done)
		} else {
			n.end(zero, nodeErr)
		}
	}
	return runErr
}

// runNode calls n's function and counts the attempt, turning a panic
// into a *PanicError. With a RetryPolicy.AttemptTimeout, the function gets
// a context bounded by it, and an attempt that returns after the bound
// passed fails with an *AttemptTimeoutError and the zero value, as a
// graph node's does (see WorkerWrapper.call).
func runNode[T any](ctx context.Context, n *StreamNode[T], prev T) (v T, err error) {
	if n.fn == nil {
		return v, ErrNilTask
	}
	k := n.attempts.Add(1)
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError(r)
		}
	}()
	if n.retry == nil || n.retry.AttemptTimeout <= 0 {
		return n.fn(ctx, prev)
	}
	return callBounded(ctx, &AttemptTimeoutError{Attempt: int(k), Timeout: n.retry.AttemptTimeout},
		func(ctx context.Context) (T, error) { return n.fn(ctx, prev) })
}

// backoff reports whether a stream node's retry, which its policy
// allowed (see retryDecision) after delay, is made, and if so waits for
// the delay on the calling goroutine, until ctx ends at the latest. A
// retry that would start at or after ctx's deadline is not made.
func backoff(ctx context.Context, delay time.Duration) bool {
	if d, ok := ctx.Deadline(); ok && !time.Now().Add(delay).Before(d) {
		return false
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done(): // Run sees it before the next attempt
			t.Stop()
		}
	}
	return true
}

// Close marks the end of the stream and waits for Run to finish the nodes
// appended before it (the tail), then returns what Run returned: nil, or
// the error that stopped the stream. Nodes appended after Close end with
// [ErrStreamClosed]. While the stream is paused at a suspended node, Close
// waits for [Stream.Resume] or the end of Run's context; it waits for a
// node's retries and their backoffs too, but no longer than Run's context
// lasts. Close is idempotent. It blocks until Run has ended, so it must
// not be called before Run on Run's goroutine, nor from inside a node.
func (s *Stream[T]) Close() error {
	if s == nil || s.finished == nil {
		return errZeroStream
	}
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.push(&StreamNode[T]{close: true, done: make(chan struct{})})
	})
	<-s.finished
	return s.err
}

// Attempts returns how many times the node's function has been called so
// far: 0 before it runs (and for a node that never ran), 1 after its
// first attempt, and one more for each retry ([StreamRetry]) and each
// [Rerun]. It is safe to call at any time; once the node has ended, it
// is final.
func (n *StreamNode[T]) Attempts() int { return int(n.attempts.Load()) }

// Done returns a channel that is closed when the node has ended.
func (n *StreamNode[T]) Done() <-chan struct{} { return n.done }

// Suspended returns a channel that is closed when the node, appended with
// [PolicySuspend], has failed and paused the stream; call [Stream.Resume]
// then. After a [Rerun] it returns a new channel, closed if the node
// pauses again. A node that ends without pausing never closes it, so
// wait on it together with [StreamNode.Done]. For a node with another
// policy it returns nil.
func (n *StreamNode[T]) Suspended() <-chan struct{} {
	if p := n.suspended.Load(); p != nil {
		return *p
	}
	return nil
}

// Wait blocks until the node has ended and returns its result: the value
// its function returned, or its error. A failed node's value is what its
// last attempt returned with the error, but the zero value when that
// attempt panicked, called runtime.Goexit or passed its AttemptTimeout,
// when the node was resumed with [FailWith], and when the stream stopped
// while the node was suspended or waited for its next attempt. A node
// that did not run has the zero value and an error: one wrapping
// [ErrStreamStopped] or [ErrStreamClosed], [ErrNilTask] for a nil fn, or
// the error of a node that AppendWith refused (see [Stream.AppendWith]
// and the zero [Stream]). A suspended node has not ended: Wait blocks
// until the stream is resumed or stopped. Since Run
// runs one node at a time, a node's function that waits for itself or a
// later node of its stream waits for ever.
func (n *StreamNode[T]) Wait() (T, error) {
	<-n.done
	return n.val, n.err
}

func (n *StreamNode[T]) end(v T, err error) {
	n.val, n.err = v, err
	close(n.done)
}
