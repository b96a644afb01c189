package asynctool

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func addOne(_ context.Context, prev int) (int, error) { return prev + 1, nil }

// runStream starts s.Run on a new goroutine and returns a channel with
// its result.
func runStream[T any](ctx context.Context, s *Stream[T]) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.Run(ctx) }()
	return ch
}

func TestStreamEachNodeSeesPredecessor(t *testing.T) {
	s := NewStream(100)
	var nodes []*StreamNode[int]
	for range 10 {
		nodes = append(nodes, s.Append(addOne))
	}
	ran := runStream(t.Context(), s)
	for range 10 {
		nodes = append(nodes, s.Append(addOne))
	}
	require.NoError(t, s.Close())
	require.NoError(t, <-ran)
	for i, n := range nodes {
		v, err := n.Wait()
		require.NoError(t, err)
		assert.Equal(t, 101+i, v)
	}
}

// TestStreamRunsAnAppendAfterItWentIdle: once every node appended has
// ended, Run waits for more, and a node appended then still runs, on the
// result of the node before it: the append wakes the stream, which has
// nothing else to start it again.
func TestStreamRunsAnAppendAfterItWentIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStream(0)
		ran := runStream(t.Context(), s)
		for want := 1; want <= 3; want++ {
			v, err := s.Append(addOne).Wait()
			require.NoError(t, err)
			assert.Equal(t, want, v)
			synctest.Wait() // Run is idle: durably blocked, waiting for an append
			select {
			case err := <-ran:
				t.Fatalf("Run returned while the stream was open: %v", err)
			default:
			}
		}
		require.NoError(t, s.Close())
		require.NoError(t, <-ran)
	})
}

// TestStreamManyProducers appends from many goroutines while the stream
// runs: every node runs once, in an order consistent with each producer's
// own order.
func TestStreamManyProducers(t *testing.T) {
	const producers, each = 200, 50
	type entry struct{ producer, seq int }
	s := NewStream(0)
	ran := runStream(t.Context(), s)
	var log []entry // no lock: nodes run one at a time
	nodes := make([][]*StreamNode[int], producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				nodes[p] = append(nodes[p], s.Append(func(_ context.Context, prev int) (int, error) {
					log = append(log, entry{p, i})
					return prev + 1, nil
				}))
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Close())
	require.NoError(t, <-ran)
	require.Len(t, log, producers*each)
	next := make([]int, producers)
	for _, e := range log {
		require.Equal(t, next[e.producer], e.seq, "producer %d out of order", e.producer)
		next[e.producer]++
	}
	seen := make(map[int]bool)
	for p := range producers {
		last := 0
		for _, n := range nodes[p] {
			v, err := n.Wait()
			require.NoError(t, err)
			assert.Greater(t, v, last, "a producer's nodes see increasing positions")
			assert.False(t, seen[v], "position %d given twice", v)
			seen[v] = true
			last = v
		}
	}
}

func TestStreamFailStop(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		fn   StreamFunc[int]
		is   func(t *testing.T, err error)
	}{
		{"error", func(context.Context, int) (int, error) { return 0, boom }, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, boom)
		}},
		{"panic", func(context.Context, int) (int, error) { panic(boom) }, func(t *testing.T, err error) {
			var pe *PanicError
			require.ErrorAs(t, err, &pe)
			assert.ErrorIs(t, err, boom)
		}},
		{"nil", nil, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, ErrNilTask)
		}},
	}
	for _, tt := range tests {
		t.Run("fail="+tt.name, func(t *testing.T) {
			s := NewStream(0)
			first := s.Append(addOne)
			bad := s.Append(tt.fn)
			var laterRan bool
			later := s.Append(func(context.Context, int) (int, error) { laterRan = true; return 0, nil })

			err := s.Run(t.Context())
			tt.is(t, err)

			v, err := first.Wait()
			require.NoError(t, err)
			assert.Equal(t, 1, v)
			_, err = bad.Wait()
			tt.is(t, err)
			_, err = later.Wait()
			assert.ErrorIs(t, err, ErrStreamStopped)
			tt.is(t, err)
			assert.False(t, laterRan)

			_, err = s.Append(addOne).Wait()
			assert.ErrorIs(t, err, ErrStreamStopped, "append after the stream stopped")
			tt.is(t, s.Close())
		})
	}
}

func TestStreamContextEndsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := NewStream("")
		started := make(chan struct{})
		slow := s.Append(func(ctx context.Context, prev string) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		})
		queued := s.Append(func(context.Context, string) (string, error) { return "x", nil })
		ran := runStream(ctx, s)
		<-started
		cancel()
		err := <-ran
		assert.ErrorIs(t, err, context.Canceled)
		_, err = slow.Wait()
		assert.ErrorIs(t, err, context.Canceled)
		_, err = queued.Wait()
		assert.ErrorIs(t, err, ErrStreamStopped)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, s.Close(), context.Canceled)
	})
}

// TestStreamContextEndedByANodeStopsTheNext: a node that succeeds as
// Run's context ends (here it cancels the context itself) keeps its
// result, and the node after it, which Run finds ctx done before
// starting, ends without running, stopped with the cause.
func TestStreamContextEndedByANodeStopsTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stopped := errors.New("operator stopped it")
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		s := NewStream(0)
		first := s.Append(func(_ context.Context, prev int) (int, error) {
			cancel(stopped)
			return prev + 1, nil
		})
		next := s.Append(addOne)
		assert.ErrorIs(t, s.Run(ctx), stopped)
		assertValues(t, []int{1}, first)
		_, err := next.Wait() // synctest reports a deadlock if it never ends
		assert.ErrorIs(t, err, ErrStreamStopped)
		assert.ErrorIs(t, err, stopped)
		assert.Zero(t, next.Attempts(), "the node after ctx ended ran")
		assert.ErrorIs(t, s.Close(), stopped)
	})
}

func TestStreamContextEndsIdleStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		s := NewStream(0)
		ran := runStream(ctx, s)
		n := s.Append(addOne)
		_, err := n.Wait()
		require.NoError(t, err)
		time.Sleep(2 * time.Minute)
		assert.ErrorIs(t, <-ran, context.DeadlineExceeded)
		_, err = s.Append(addOne).Wait()
		assert.ErrorIs(t, err, ErrStreamStopped)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestStreamCloseWaitsForTail(t *testing.T) {
	s := NewStream(0)
	release := make(chan struct{})
	tail := s.Append(func(_ context.Context, prev int) (int, error) { <-release; return prev + 1, nil })
	ran := runStream(t.Context(), s)
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	require.Eventually(t, s.closing.Load, 10*time.Second, time.Millisecond, "Close has begun")
	select {
	case <-closed:
		t.Fatal("Close returned before the tail ended")
	case <-time.After(20 * time.Millisecond):
	}
	_, err := s.Append(addOne).Wait()
	assert.ErrorIs(t, err, ErrStreamClosed, "append after Close")
	close(release)
	require.NoError(t, <-closed)
	require.NoError(t, <-ran)
	v, err := tail.Wait()
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.NoError(t, s.Close(), "Close is idempotent")
}

// TestStreamCloseMarkBeforeCtxAfterTheLastNode pins Run's doc for Close
// and ctx ending together: the last node before Close's mark ends ctx as
// it runs, once the mark is in the intake; Run finds the mark before it
// looks at ctx, and Run and Close return nil.
func TestStreamCloseMarkBeforeCtxAfterTheLastNode(t *testing.T) {
	for range 20 {
		s := NewStream(0)
		ctx, cancel := context.WithCancel(t.Context())
		closed := make(chan error, 1)
		last := s.Append(func(_ context.Context, prev int) (int, error) {
			// wake may still hold the signal of this node's own Append,
			// which Run served by taking it: drop it (the node runs on
			// Run's goroutine), so that the next signal is Close's push
			// of its mark into the intake, empty since Run took the node.
			select {
			case <-s.wake:
			default:
			}
			go func() { closed <- s.Close() }()
			require.Eventually(t, func() bool { return len(s.wake) == 1 }, 10*time.Second, 10*time.Microsecond, "Close's mark is in")
			cancel()
			return prev + 1, nil
		})
		require.NoError(t, s.Run(ctx))
		require.NoError(t, <-closed)
		v, err := last.Wait()
		require.NoError(t, err)
		assert.Equal(t, 1, v)
	}
}

// TestStreamAppendRacingCloseEndsClosed: an Append that found the
// stream open just before Close marked it links its node after Close's
// marker; Run takes both in one batch, ends the stream at the marker,
// and ends that node with ErrStreamClosed without running it, as every
// node appended must end.
func TestStreamAppendRacingCloseEndsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewStream(0)
		before := s.Append(addOne)
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait() // Close has linked its marker and waits for Run
		// The rest of an AppendWith that checked closing before Close
		// set it.
		late := &StreamNode[int]{fn: addOne, done: make(chan struct{})}
		s.push(late)
		require.NoError(t, s.Run(t.Context()))
		require.NoError(t, <-closed)
		assertValues(t, []int{1}, before)
		_, err := late.Wait() // synctest reports a deadlock if it never ends
		assert.ErrorIs(t, err, ErrStreamClosed)
		assert.Zero(t, late.Attempts(), "a node linked after Close's marker ran")
	})
}

func TestStreamCloseBeforeRun(t *testing.T) {
	s := NewStream(1)
	n := s.Append(addOne)
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	require.NoError(t, s.Run(t.Context()))
	require.NoError(t, <-closed)
	v, err := n.Wait()
	require.NoError(t, err)
	assert.Equal(t, 2, v)
}

func TestStreamRunTwice(t *testing.T) {
	s := NewStream(0)
	ran := runStream(t.Context(), s)
	s.Append(addOne).Wait()
	assert.ErrorIs(t, s.Run(t.Context()), ErrStreamStarted)
	require.NoError(t, s.Close())
	require.NoError(t, <-ran)
}

func TestStreamNodeGoexit(t *testing.T) {
	s := NewStream(0)
	n := s.Append(func(context.Context, int) (int, error) { runtime.Goexit(); return 0, nil })
	later := s.Append(addOne)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(t.Context())
	}()
	<-done
	// The node that called Goexit ran: it failed, and was not stopped
	// before it ran, as ErrStreamStopped says of the nodes after it.
	_, err := n.Wait()
	assert.ErrorIs(t, err, ErrGoexit)
	assert.NotErrorIs(t, err, ErrStreamStopped)
	assert.Equal(t, 1, n.Attempts())
	_, err = later.Wait()
	assert.ErrorIs(t, err, ErrStreamStopped)
	assert.ErrorIs(t, err, ErrGoexit)
	assert.ErrorIs(t, s.Close(), ErrGoexit)
}

// goexitCtx is a context whose Done or Err (as set), or both once armed
// is closed, calls runtime.Goexit: Run's goroutine ends outside any
// node's function.
type goexitCtx struct {
	context.Context
	inDone, inErr bool
	armed         <-chan struct{}
}

func (c goexitCtx) Done() <-chan struct{} {
	if c.inDone || c.isArmed() {
		runtime.Goexit()
	}
	return c.Context.Done()
}

func (c goexitCtx) Err() error {
	if c.inErr || c.isArmed() {
		runtime.Goexit()
	}
	return c.Context.Err()
}

func (c goexitCtx) isArmed() bool {
	select {
	case <-c.armed:
		return true
	default:
		return false
	}
}

// TestStreamGoexitOutsideAnyNode: Run's goroutine that ends in a method
// of its ctx, not in a node's function, blames no node. Run's deferred
// end took node i of its batch as the one that called Goexit: on an idle
// stream (an empty batch) that indexed past the batch, a panic that
// left Close waiting for ever, and with a node about to start it failed
// that node with ErrGoexit although its function never ran. A node that
// had failed and was suspended, or waited for its next attempt, ends with
// its own failure, as when ctx ends then: the suspended one ended as if
// it had never run, and a Resume after Run's end still reported success;
// the one in its backoff was blamed on its retry policy.
func TestStreamGoexitOutsideAnyNode(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		s := NewStream(0)
		done := make(chan any, 1)
		go func() {
			defer func() { done <- recover() }()
			_ = s.Run(goexitCtx{Context: t.Context(), inDone: true})
		}()
		require.Nil(t, <-done, "Run's goroutine panicked as it ended")
		_, err := s.Append(addOne).Wait()
		assert.ErrorIs(t, err, ErrStreamStopped)
		assert.ErrorContains(t, s.Close(), "outside any node")
	})
	t.Run("before a node", func(t *testing.T) {
		s := NewStream(0)
		n := s.Append(addOne)
		done := make(chan any, 1)
		go func() {
			defer func() { done <- recover() }()
			_ = s.Run(goexitCtx{Context: t.Context(), inErr: true})
		}()
		require.Nil(t, <-done, "Run's goroutine panicked as it ended")
		_, err := n.Wait()
		assert.Zero(t, n.Attempts(), "the node's function never ran")
		assert.ErrorIs(t, err, ErrStreamStopped)
		assert.NotErrorIs(t, err, ErrGoexit, "the node called no Goexit")
		assert.ErrorContains(t, s.Close(), "outside any node")
	})
	for _, tt := range []struct {
		name   string
		policy FailurePolicy
		opts   []StreamNodeOption
	}{
		{"while suspended", PolicySuspend, nil},
		{"waiting for a retry", PolicyContinue, []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(time.Hour)})}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStream(0)
			fn, calls := flaky(1)
			n := s.AppendWith(fn, tt.policy, tt.opts...)
			next := s.Append(addOne)
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				// Appended before Run: its first call of ctx.Done is
				// in the pause, or in the backoff.
				_ = s.Run(goexitCtx{Context: t.Context(), inDone: true})
			}()
			require.Nil(t, <-done, "Run's goroutine panicked as it ended")
			assert.Equal(t, 1, *calls, "calls of the node's function")
			_, err := n.Wait()
			assert.ErrorIs(t, err, errFlaky, "the node's own failure")
			assert.ErrorContains(t, err, "outside any node")
			assert.NotErrorIs(t, err, ErrStreamStopped, "the node ran")
			assert.NotErrorIs(t, err, ErrGoexit, "neither the node nor its retry policy called Goexit")
			_, err = next.Wait()
			assert.ErrorIs(t, err, ErrStreamStopped)
			assert.ErrorIs(t, s.Resume(SucceedWith(1)), ErrNotPending, "Run has ended: nothing is suspended")
			assert.ErrorContains(t, s.Close(), "outside any node")
		})
	}
	// A node that failed, then succeeded on its retry or was resumed,
	// no longer waits: when Run's goroutine ends outside any node later,
	// the node after it is stopped, not ended with that old failure.
	for _, tt := range []struct {
		name   string
		policy FailurePolicy
		opts   []StreamNodeOption
		resume bool
	}{
		{"after a retry succeeded", PolicyContinue, []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 2})}, false},
		{"after a resumption", PolicySuspend, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := NewStream(0)
				fn, _ := flaky(1)
				n := s.AppendWith(fn, tt.policy, tt.opts...)
				armed := make(chan struct{})
				done := make(chan any, 1)
				go func() {
					defer func() { done <- recover() }()
					_ = s.Run(goexitCtx{Context: t.Context(), armed: armed})
				}()
				if tt.resume {
					synctest.Wait() // n is suspended
					require.NoError(t, s.Resume(SucceedWith(5)))
				}
				_, err := n.Wait()
				require.NoError(t, err)
				synctest.Wait() // Run waits for the next node
				close(armed)
				next := s.Append(addOne)
				require.Nil(t, <-done, "Run's goroutine panicked as it ended")
				_, err = next.Wait()
				assert.ErrorIs(t, err, ErrStreamStopped)
				assert.NotErrorIs(t, err, errFlaky, "the node before it failed, then succeeded")
				assert.ErrorContains(t, s.Close(), "outside any node")
			})
		})
	}
}

// TestStreamEveryNodeEndsOnce appends from many goroutines while the
// stream fails part-way: every node ends, with a value or an error.
func TestStreamEveryNodeEndsOnce(t *testing.T) {
	for range 20 {
		s := NewStream(0)
		ran := runStream(t.Context(), s)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var nodes []*StreamNode[int]
		for p := range 16 {
			wg.Go(func() {
				for i := range 100 {
					n := s.Append(func(_ context.Context, prev int) (int, error) {
						if p == 3 && i == 50 {
							return 0, errors.New("fail")
						}
						return prev + 1, nil
					})
					mu.Lock()
					nodes = append(nodes, n)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.Error(t, <-ran)
		ok, failed := 0, 0
		for _, n := range nodes {
			if _, err := n.Wait(); err == nil {
				ok++
			} else {
				failed++
			}
		}
		assert.Equal(t, 1600, ok+failed)
		assert.Positive(t, failed)
	}
}

func TestStreamFailurePolicies(t *testing.T) {
	boom := errors.New("boom")
	fail := func(context.Context, int) (int, error) { return -1, boom }
	tests := []struct {
		name   string
		policy FailurePolicy
		fn     StreamFunc[int]
		check  func(t *testing.T, runErr, badErr error, next *StreamNode[int])
	}{
		{"zero=fail", 0, fail, func(t *testing.T, runErr, badErr error, next *StreamNode[int]) {
			assert.ErrorIs(t, runErr, boom)
			_, err := next.Wait()
			assert.ErrorIs(t, err, ErrStreamStopped)
			assert.ErrorIs(t, err, boom)
		}},
		{"fail", PolicyFail, fail, func(t *testing.T, runErr, badErr error, next *StreamNode[int]) {
			assert.ErrorIs(t, runErr, boom)
			_, err := next.Wait()
			assert.ErrorIs(t, err, ErrStreamStopped)
			assert.ErrorIs(t, err, boom)
		}},
		{"continue", PolicyContinue, fail, func(t *testing.T, runErr, badErr error, next *StreamNode[int]) {
			assert.NoError(t, runErr, "a continued failure does not fail the stream")
			v, err := next.Wait()
			require.NoError(t, err)
			assert.Equal(t, 2, v, "the next node receives the last successful result")
		}},
		{"continue/panic", PolicyContinue, func(context.Context, int) (int, error) { panic(boom) }, func(t *testing.T, runErr, badErr error, next *StreamNode[int]) {
			assert.NoError(t, runErr)
			var pe *PanicError
			assert.ErrorAs(t, badErr, &pe)
			v, err := next.Wait()
			require.NoError(t, err)
			assert.Equal(t, 2, v)
		}},
		{"end", PolicyEnd, fail, func(t *testing.T, runErr, badErr error, next *StreamNode[int]) {
			var ee *StreamEndError
			require.ErrorAs(t, runErr, &ee)
			assert.Equal(t, 2, ee.Position)
			assert.ErrorIs(t, runErr, boom)
			_, err := next.Wait()
			assert.ErrorIs(t, err, ErrStreamStopped)
			require.ErrorAs(t, err, &ee, "later nodes name the node that ended the stream")
			assert.Equal(t, 2, ee.Position)
		}},
	}
	for _, tt := range tests {
		t.Run("policy="+tt.name, func(t *testing.T) {
			s := NewStream(0)
			first := s.Append(addOne)
			bad := s.AppendWith(tt.fn, tt.policy)
			next := s.Append(addOne)
			ran := runStream(t.Context(), s)
			closeErr := s.Close()
			runErr := <-ran
			assert.Equal(t, runErr, closeErr)

			v, err := first.Wait()
			require.NoError(t, err)
			assert.Equal(t, 1, v)
			_, badErr := bad.Wait()
			assert.ErrorIs(t, badErr, boom, "the failed node records its own error")
			tt.check(t, runErr, badErr, next)
			assert.Nil(t, bad.Suspended())
		})
	}
}

func TestStreamEndAffectsLaterAppends(t *testing.T) {
	boom := errors.New("boom")
	s := NewStream(0)
	s.AppendWith(func(context.Context, int) (int, error) { return 0, boom }, PolicyEnd)
	var ee *StreamEndError
	require.ErrorAs(t, s.Run(t.Context()), &ee)
	assert.Equal(t, 1, ee.Position)
	_, err := s.Append(addOne).Wait()
	assert.ErrorIs(t, err, ErrStreamStopped)
	assert.ErrorAs(t, err, &ee)
	assert.ErrorIs(t, err, boom)
}

func TestStreamUnknownPolicy(t *testing.T) {
	s := NewStream(0)
	_, err := s.AppendWith(addOne, FailurePolicy(99)).Wait()
	assert.ErrorIs(t, err, ErrBadPolicy, "the sentinel of a FailurePolicy that is none of the four")
	assert.ErrorContains(t, err, "unknown failure policy")
	next := s.Append(addOne)
	require.NoError(t, closeAfterRun(t, s))
	v, err := next.Wait()
	require.NoError(t, err)
	assert.Equal(t, 1, v, "the refused node is not part of the chain")
}

// closeAfterRun runs s on a new goroutine, closes it and returns Run's
// error.
func closeAfterRun[T any](t *testing.T, s *Stream[T]) error {
	ran := runStream(t.Context(), s)
	closeErr := s.Close()
	err := <-ran
	assert.Equal(t, err, closeErr)
	return err
}

// flaky fails its first failures calls with errFlaky, then adds 10.
func flaky(failures int) (StreamFunc[int], *int) {
	calls := new(int)
	return func(_ context.Context, prev int) (int, error) {
		*calls++
		if *calls <= failures {
			return 0, errFlaky
		}
		return prev + 10, nil
	}, calls
}

var errFlaky = errors.New("flaky")

func TestStreamSuspendResume(t *testing.T) {
	gaveUp := errors.New("gave up")
	tests := []struct {
		name  string
		how   Resumption
		check func(t *testing.T, runErr error, bad, next, late *StreamNode[int])
	}{
		{"rerun", Rerun(), func(t *testing.T, runErr error, bad, next, late *StreamNode[int]) {
			require.NoError(t, runErr)
			assertValues(t, []int{11, 12, 13}, bad, next, late)
		}},
		{"succeed", SucceedWith(42), func(t *testing.T, runErr error, bad, next, late *StreamNode[int]) {
			require.NoError(t, runErr)
			assertValues(t, []int{42, 43, 44}, bad, next, late)
		}},
		{"fail", FailWith(gaveUp), func(t *testing.T, runErr error, bad, next, late *StreamNode[int]) {
			assert.ErrorIs(t, runErr, gaveUp)
			_, err := bad.Wait()
			assert.ErrorIs(t, err, gaveUp)
			for _, n := range []*StreamNode[int]{next, late} {
				_, err := n.Wait()
				assert.ErrorIs(t, err, ErrStreamStopped)
				assert.ErrorIs(t, err, gaveUp)
			}
		}},
	}
	for _, tt := range tests {
		t.Run("how="+tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := NewStream(0)
				assert.ErrorIs(t, s.Resume(Rerun()), ErrNotPending, "not started")
				s.Append(addOne)
				fn, calls := flaky(1)
				bad := s.AppendWith(fn, PolicySuspend)
				next := s.Append(addOne)
				ran := runStream(t.Context(), s)
				closed := make(chan error, 1)
				<-bad.Suspended()
				late := s.Append(addOne) // accepted while paused
				go func() { closed <- s.Close() }()
				synctest.Wait() // Run and Close are durably blocked: no spinning
				for _, n := range []*StreamNode[int]{bad, next, late} {
					select {
					case <-n.Done():
						t.Fatal("a node ended while the stream was paused")
					default:
					}
				}

				assert.ErrorIs(t, s.Resume(SucceedWith("x")), ErrResultType)
				assert.Error(t, s.Resume(FailWith(nil)))
				assert.ErrorContains(t, s.Resume(Resumption{}), "zero Resumption: make one with Rerun, SucceedWith or FailWith")
				require.NoError(t, s.Resume(tt.how), "refused resumptions do not consume the pause")
				assert.ErrorIs(t, s.Resume(tt.how), ErrNotPending, "resumes once")
				runErr := <-ran
				assert.Equal(t, runErr, <-closed)
				tt.check(t, runErr, bad, next, late)
				if tt.name == "rerun" {
					assert.Equal(t, 2, *calls)
				} else {
					assert.Equal(t, 1, *calls)
				}
			})
		})
	}
}

func assertValues(t *testing.T, want []int, nodes ...*StreamNode[int]) {
	t.Helper()
	for i, n := range nodes {
		v, err := n.Wait()
		require.NoError(t, err)
		assert.Equal(t, want[i], v, "node %d", i)
	}
}

func TestStreamSuspendAgainAfterRerun(t *testing.T) {
	s := NewStream(0)
	fn, calls := flaky(2)
	bad := s.AppendWith(fn, PolicySuspend)
	ran := runStream(t.Context(), s)
	first := bad.Suspended()
	<-first
	require.NoError(t, s.Resume(Rerun()))
	second := bad.Suspended()
	assert.NotEqual(t, first, second, "a rerun node gets a new Suspended channel")
	<-second
	require.NoError(t, s.Resume(Rerun()))
	require.NoError(t, s.Close())
	require.NoError(t, <-ran)
	assertValues(t, []int{10}, bad)
	assert.Equal(t, 3, *calls)
}

func TestStreamSuspendedUntilContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		s := NewStream(0)
		fn, _ := flaky(1)
		bad := s.AppendWith(fn, PolicySuspend)
		next := s.Append(addOne)
		ran := runStream(ctx, s)
		<-bad.Suspended()
		time.Sleep(2 * time.Minute)
		assert.ErrorIs(t, <-ran, context.DeadlineExceeded)
		_, err := bad.Wait()
		assert.ErrorIs(t, err, errFlaky)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = next.Wait()
		assert.ErrorIs(t, err, ErrStreamStopped)
		assert.ErrorIs(t, s.Resume(SucceedWith(1)), ErrNotPending)
		assert.ErrorIs(t, s.Close(), context.DeadlineExceeded)
	})
}

// TestStreamResumeRacesCancel resumes from two goroutines while a third
// cancels Run's context: exactly one of the three decides how the
// suspended node ends, and it ends once.
func TestStreamResumeRacesCancel(t *testing.T) {
	for iter := range 200 {
		ctx, cancel := context.WithCancel(t.Context())
		s := NewStream(0)
		fn, _ := flaky(1)
		bad := s.AppendWith(fn, PolicySuspend)
		ran := runStream(ctx, s)
		<-bad.Suspended()
		how := SucceedWith(7)
		if iter%2 == 1 {
			how = Rerun()
		}
		var wg sync.WaitGroup
		var errs [2]error
		for k := range errs {
			wg.Go(func() { errs[k] = s.Resume(how) })
		}
		wg.Go(cancel)
		wg.Wait()
		assert.ErrorIs(t, <-ran, context.Canceled)
		<-bad.Done()
		_, badErr := bad.Wait()
		ctxWon := errors.Is(badErr, errFlaky)
		winners := 0
		for _, err := range errs {
			if err == nil {
				winners++
			} else {
				assert.ErrorIs(t, err, ErrNotPending)
			}
		}
		if ctxWon {
			assert.ErrorIs(t, badErr, context.Canceled)
			assert.Zero(t, winners, "ctx won, yet a Resume succeeded")
		} else {
			assert.Equal(t, 1, winners, "iteration %d: Resume winners", iter)
			if iter%2 == 0 {
				assert.NoError(t, badErr)
			} else if badErr != nil {
				assert.ErrorIs(t, badErr, ErrStreamStopped, "rerun accepted, ctx ended first")
			}
		}
	}
}

// hookedDoneCtx calls onDone each time its Done method is called.
type hookedDoneCtx struct {
	context.Context
	onDone func()
}

func (c hookedDoneCtx) Done() <-chan struct{} {
	c.onDone()
	return c.Context.Done()
}

// TestStreamResumeThatWonTheRaceWithCancelDecides: a Resume that took the
// pause decides how the suspended node ends, even when Run, waiting in
// the pause, finds the end of its context ready too. Here the node
// cancels ctx as it fails, and Resume runs in Run's first call of
// ctx.Done, in the pause: both are ready as the pause waits, and select
// picks either.
func TestStreamResumeThatWonTheRaceWithCancelDecides(t *testing.T) {
	for range 64 {
		ctx, cancel := context.WithCancel(t.Context())
		t.Cleanup(cancel)
		s := NewStream(0)
		n := s.AppendWith(func(context.Context, int) (int, error) { cancel(); return 0, errFlaky }, PolicySuspend)
		var once sync.Once
		resumeErr := errors.New("Resume was not called")
		hooked := hookedDoneCtx{Context: ctx, onDone: func() {
			once.Do(func() { resumeErr = s.Resume(SucceedWith(7)) })
		}}
		assert.ErrorIs(t, s.Run(hooked), context.Canceled)
		require.NoError(t, resumeErr, "the stream was paused")
		v, err := n.Wait()
		require.NoError(t, err, "Resume succeeded, yet the end of ctx decided")
		assert.Equal(t, 7, v)
	}
}

// TestStreamContinueManyProducers appends nodes with PolicyContinue from
// many goroutines, some failing: the stream goes on, and each successful
// node receives the last successful result, so successes count 1, 2, 3...
func TestStreamContinueManyProducers(t *testing.T) {
	const producers, each = 16, 100
	s := NewStream(0)
	ran := runStream(t.Context(), s)
	nodes := make([][]*StreamNode[int], producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				nodes[p] = append(nodes[p], s.AppendWith(func(_ context.Context, prev int) (int, error) {
					switch (p*each + i) % 7 {
					case 0:
						return -1, errors.New("fail")
					case 3:
						panic("boom")
					}
					return prev + 1, nil
				}, PolicyContinue))
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Close())
	require.NoError(t, <-ran)
	seen := make(map[int]bool)
	failed := 0
	for p := range producers {
		for i, n := range nodes[p] {
			v, err := n.Wait()
			if k := (p*each + i) % 7; k == 0 || k == 3 {
				require.Error(t, err)
				failed++
				continue
			}
			require.NoError(t, err)
			assert.False(t, seen[v], "value %d given twice", v)
			seen[v] = true
		}
	}
	ok := producers*each - failed
	assert.Positive(t, failed)
	for v := 1; v <= ok; v++ {
		assert.True(t, seen[v], "no node got %d: a success did not see the last success", v)
	}
}

// TestZeroStreamFailsItsNodes: a zero Stream's Run panicked (close of a
// nil channel), and its Close waited for ever for a Run that could never
// end. Its nodes now end at once with the error, and Run and Close
// return it.
func TestZeroStreamFailsItsNodes(t *testing.T) {
	var s Stream[int]
	n := s.Append(func(_ context.Context, prev int) (int, error) { return prev + 1, nil })
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the node of a zero Stream waits for ever")
	}
	_, err := n.Wait()
	assert.ErrorContains(t, err, "NewStream")
	assert.ErrorContains(t, s.Run(context.Background()), "NewStream")
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		assert.ErrorContains(t, err, "NewStream")
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a zero Stream waits for ever")
	}
}

// TestNilStreamFailsItsNodes: a nil *Stream (a field never set) panicked
// with a nil dereference; it behaves as the zero Stream does.
func TestNilStreamFailsItsNodes(t *testing.T) {
	var s *Stream[int]
	n := s.Append(func(_ context.Context, prev int) (int, error) { return prev + 1, nil })
	_, err := n.Wait()
	assert.ErrorContains(t, err, "NewStream")
	assert.ErrorContains(t, s.Run(context.Background()), "NewStream")
	assert.ErrorContains(t, s.Close(), "NewStream")
	assert.ErrorIs(t, s.Resume(Rerun()), ErrNotPending)
}

// TestStreamSucceedWithNil: Resume(SucceedWith(nil)) ends a suspended
// node with the zero value when nil converts to the stream's type, and is
// refused with ErrResultType, the stream staying paused, when it does
// not. A stream of unsafe.Pointer refused it, although nil converts to
// an unsafe.Pointer.
func TestStreamSucceedWithNil(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"pointer", checkSucceedWithNil[*int](true)},
		{"slice", checkSucceedWithNil[[]int](true)},
		{"map", checkSucceedWithNil[map[string]int](true)},
		{"chan", checkSucceedWithNil[chan int](true)},
		{"func", checkSucceedWithNil[func()](true)},
		{"interface", checkSucceedWithNil[error](true)},
		{"any", checkSucceedWithNil[any](true)},
		{"unsafe.Pointer", checkSucceedWithNil[unsafe.Pointer](true)},
		{"int", checkSucceedWithNil[int](false)},
		{"string", checkSucceedWithNil[string](false)},
		{"struct", checkSucceedWithNil[struct{ p *int }](false)},
	} {
		t.Run(tt.name, tt.run)
	}
}

// checkSucceedWithNil resumes a stream of T, paused at a failed node,
// with SucceedWith(nil), which it accepts or not as accepted says.
func checkSucceedWithNil[T any](accepted bool) func(t *testing.T) {
	return func(t *testing.T) {
		var zero T
		s := NewStream(zero)
		n := s.AppendWith(func(_ context.Context, prev T) (T, error) { return prev, errFlaky }, PolicySuspend)
		ran := runStream(t.Context(), s)
		<-n.Suspended()
		err := s.Resume(SucceedWith(nil))
		if !accepted {
			assert.ErrorIs(t, err, ErrResultType)
			require.NoError(t, s.Resume(FailWith(errBoom)), "a refused resumption leaves the stream paused")
			assert.ErrorIs(t, <-ran, errBoom)
			return
		}
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.NoError(t, <-ran)
		v, err := n.Wait()
		require.NoError(t, err)
		assert.True(t, reflect.ValueOf(&v).Elem().IsZero(), "the node's value is the zero value: got %v", v)
	}
}

// TestStreamPolicyEndAfterTheStop: a node under PolicyEnd that fails
// after Run's context ended, or after Close was called, has failed like
// any other node (Run's documentation): its policy applies, so Run and
// Close return its *StreamEndError, and the node after it, which never
// runs, ends with that same error, not with the context's cause.
func TestStreamPolicyEndAfterTheStop(t *testing.T) {
	errStop := errors.New("the caller stopped")
	for _, stop := range []string{"context", "Close"} {
		t.Run(stop, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				s := NewStream(0)
				failing, release := make(chan struct{}), make(chan struct{})
				critical := s.AppendWith(func(context.Context, int) (int, error) {
					close(failing)
					<-release
					return 0, errBoom
				}, PolicyEnd)
				next := s.Append(addOne)
				ran := runStream(ctx, s)
				<-failing
				closed := make(chan error, 1)
				if stop == "context" {
					cancel(errStop)
				} else {
					go func() { closed <- s.Close() }()
					synctest.Wait() // Close waits for Run
				}
				close(release)
				err := <-ran
				var ee *StreamEndError
				require.ErrorAs(t, err, &ee)
				assert.Equal(t, 1, ee.Position)
				assert.ErrorIs(t, err, errBoom)
				assert.NotErrorIs(t, err, errStop)
				_, cerr := critical.Wait()
				assert.Equal(t, errBoom, cerr, "its own failure")
				_, nerr := next.Wait()
				assert.ErrorIs(t, nerr, ErrStreamStopped)
				require.ErrorAs(t, nerr, &ee, "the node after it names it")
				assert.Equal(t, 1, ee.Position)
				assert.NotErrorIs(t, nerr, errStop)
				assert.Zero(t, next.Attempts())
				if stop == "Close" {
					assert.Equal(t, err, <-closed)
				} else {
					assert.Equal(t, err, s.Close())
				}
			})
		})
	}
}
