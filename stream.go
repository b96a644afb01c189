package asynctool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

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
// Failure policy: fail-stop. A node that returns an error or panics (its
// error is then a [*PanicError]) stops the stream: Run returns that
// error, and every node after it, including nodes appended later, ends
// without running, with an error that wraps [ErrStreamStopped] and the
// cause. The same happens when Run's context ends. Other policies
// (suspend until resumed, continue, end) are planned per node.
//
// Every node appended ends exactly once, with a result or an error,
// whether or not Run is ever called: unless Run or Close ends the stream,
// nodes wait.
//
// A Stream is safe for concurrent use. It must be created with
// [NewStream] and must not be copied after first use.
type Stream[T any] struct {
	initial  T
	intake   mpsc.Queue[*StreamNode[T]]
	wake     chan struct{} // capacity 1: the intake became non-empty
	started  atomic.Bool
	closing  atomic.Bool   // Close was called
	finished chan struct{} // closed when Run has returned

	// Written by Run before it seals the intake and closes finished.
	err     error // what Run returned
	lateErr error // the error of nodes appended after the end

	closeOnce sync.Once
}

// StreamNode is the handle of one appended node: its result, once it has
// ended.
type StreamNode[T any] struct {
	fn    StreamFunc[T]
	close bool // Close's marker, not a user node
	done  chan struct{}
	val   T
	err   error
}

// NewStream returns an empty stream whose first node will receive
// initial.
func NewStream[T any](initial T) *Stream[T] {
	return &Stream[T]{
		initial:  initial,
		wake:     make(chan struct{}, 1),
		finished: make(chan struct{}),
	}
}

// Append adds a node that runs fn after every node appended before it.
// It never blocks and never fails: a node appended after Close ends at
// once with [ErrStreamClosed], one appended after the stream stopped (a
// failure, or the end of Run's context) ends at once with an error
// wrapping [ErrStreamStopped], and a nil fn gives a node that fails with
// [ErrNilTask] when its turn comes.
func (s *Stream[T]) Append(fn StreamFunc[T]) *StreamNode[T] {
	n := &StreamNode[T]{fn: fn, done: make(chan struct{})}
	if s.closing.Load() {
		var zero T
		n.end(zero, ErrStreamClosed)
		return n
	}
	s.push(n)
	return n
}

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
//     returns nil;
//   - a node fails: Run returns the node's error;
//   - ctx ends: Run returns context.Cause(ctx) without starting another
//     node (a running node sees ctx end and should return).
//
// Nodes that did not run end with an error, so that no node waits
// forever. Run may be called only once; later calls return
// [ErrStreamStarted].
func (s *Stream[T]) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return ErrStreamStarted
	}
	var (
		batch []*StreamNode[T]
		i     int // next node of batch to run
		ended bool
	)
	defer func() {
		if !ended {
			// A node called runtime.Goexit on Run's goroutine.
			cause := errors.New("asynctool: a stream node called runtime.Goexit")
			s.end(batch[i:], fmt.Errorf("%w: %w", ErrStreamStopped, cause), cause)
		}
		close(s.finished)
	}()
	prev := s.initial
	for {
		batch, i = s.intake.TakeAll(batch[:0]), 0
		if len(batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				cause := context.Cause(ctx)
				ended = true
				return s.end(nil, fmt.Errorf("%w: %w", ErrStreamStopped, cause), cause)
			}
		}
		for ; i < len(batch); i++ {
			n := batch[i]
			if n.close {
				close(n.done)
				ended = true
				return s.end(batch[i+1:], ErrStreamClosed, nil)
			}
			if ctx.Err() != nil {
				cause := context.Cause(ctx)
				ended = true
				return s.end(batch[i:], fmt.Errorf("%w: %w", ErrStreamStopped, cause), cause)
			}
			v, err := runNode(ctx, n.fn, prev)
			if err != nil {
				// Fail-stop. A later failure policy chooses here between
				// stopping, suspending and carrying on.
				n.end(v, err)
				ended = true
				return s.end(batch[i+1:], fmt.Errorf("%w: %w", ErrStreamStopped, err), err)
			}
			n.end(v, nil)
			prev = v
			batch[i] = nil
		}
	}
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

// runNode runs fn, turning a panic into a *PanicError.
func runNode[T any](ctx context.Context, fn StreamFunc[T], prev T) (v T, err error) {
	if fn == nil {
		return v, ErrNilTask
	}
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError(r)
		}
	}()
	return fn(ctx, prev)
}

// Close marks the end of the stream and waits for Run to finish the
// nodes appended before it (the tail), then returns what Run returned:
// nil, or the error that stopped the stream. Nodes appended after Close
// end with [ErrStreamClosed]. Close is idempotent. It blocks until Run
// has ended, so it must not be called before Run on Run's goroutine, nor
// from inside a node.
func (s *Stream[T]) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.push(&StreamNode[T]{close: true, done: make(chan struct{})})
	})
	<-s.finished
	return s.err
}

// Done returns a channel that is closed when the node has ended.
func (n *StreamNode[T]) Done() <-chan struct{} { return n.done }

// Wait blocks until the node has ended and returns its result: the value
// its function returned, or its error. A node that did not run has the
// zero value and an error wrapping [ErrStreamStopped], or
// [ErrStreamClosed].
func (n *StreamNode[T]) Wait() (T, error) {
	<-n.done
	return n.val, n.err
}

func (n *StreamNode[T]) end(v T, err error) {
	n.val, n.err = v, err
	close(n.done)
}
