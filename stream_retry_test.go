package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStreamRetryNoneAllocatesNothingExtra pins the cost of appending a
// node without retries: the node, its done channel and its intake link
// (a PolicySuspend node adds its Suspended channel and the pointer to
// it). Retries must not add to it, nor does a retry option built once
// and given to many nodes.
func TestStreamRetryNoneAllocatesNothingExtra(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	fn := func(_ context.Context, prev int) (int, error) { return prev, nil }
	retry := StreamRetry(RetryPolicy{Attempts: 3})
	for _, tt := range []struct {
		name   string
		policy FailurePolicy
		opts   []StreamNodeOption
		want   float64
	}{
		{"fail", PolicyFail, nil, 3},
		{"continue", PolicyContinue, nil, 3},
		{"end", PolicyEnd, nil, 3},
		{"suspend", PolicySuspend, nil, 5},
		{"fail with retries", PolicyFail, []StreamNodeOption{retry}, 3},
		{"suspend with retries", PolicySuspend, []StreamNodeOption{retry}, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStream(0) // never run: the nodes wait in the intake
			got := testing.AllocsPerRun(1000, func() { s.AppendWith(fn, tt.policy, tt.opts...) })
			assert.Equal(t, tt.want, got, "allocations per AppendWith: got, want")
		})
	}
	if unsafe.Sizeof(uintptr(0)) == 8 {
		// The retry policy and the attempt count fit in the node's old
		// size: a bigger node would be a bigger size class for every node.
		assert.Equal(t, uintptr(64), unsafe.Sizeof(StreamNode[int]{}), "size of StreamNode[int]")
	}
}

var errPermanent = errors.New("permanent")

// TestStreamRetryOutcomes runs a node with retries, then a node that adds
// one, on a stream whose initial value is 1. The node's k-th call (from
// 1) returns what outcome(k) says: an error, or nil for prev+10. Time is
// fake, so the delays between calls are exact.
func TestStreamRetryOutcomes(t *testing.T) {
	const ms = time.Millisecond
	failUntil := func(ok int, err error) func(int) error {
		return func(k int) error {
			if k < ok {
				return err
			}
			return nil
		}
	}
	always := func(err error) func(int) error { return func(int) error { return err } }
	tests := []struct {
		name         string
		policy       FailurePolicy
		opts         []StreamNodeOption
		outcome      func(k int) error
		wantAttempts int
		wantDelays   []time.Duration // between consecutive calls
		check        func(t *testing.T, runErr error, node, next *StreamNode[int])
	}{
		{
			name:         "succeeds on the third attempt",
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 3, Backoff: ExponentialBackoff(10*ms, time.Second, 0)})},
			outcome:      failUntil(3, errBoom),
			wantAttempts: 3,
			wantDelays:   []time.Duration{10 * ms, 20 * ms},
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				require.NoError(t, runErr)
				assertValues(t, []int{11, 12}, node, next)
			},
		},
		{
			name:         "exhausted, PolicyFail",
			policy:       PolicyFail,
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 3, Backoff: ConstantBackoff(10 * ms)})},
			outcome:      always(errBoom),
			wantAttempts: 3,
			wantDelays:   []time.Duration{10 * ms, 10 * ms},
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				assert.ErrorIs(t, runErr, errBoom)
				_, err := node.Wait()
				assert.ErrorIs(t, err, errBoom)
				_, err = next.Wait()
				assert.ErrorIs(t, err, ErrStreamStopped)
				assert.ErrorIs(t, err, errBoom)
			},
		},
		{
			name:         "exhausted, PolicyContinue",
			policy:       PolicyContinue,
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 3, Backoff: ConstantBackoff(10 * ms)})},
			outcome:      always(errBoom),
			wantAttempts: 3,
			wantDelays:   []time.Duration{10 * ms, 10 * ms},
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				require.NoError(t, runErr)
				_, err := node.Wait()
				assert.ErrorIs(t, err, errBoom)
				v, err := next.Wait()
				require.NoError(t, err)
				assert.Equal(t, 2, v, "next node's input: the initial value, got, want")
			},
		},
		{
			name:         "exhausted, PolicyEnd",
			policy:       PolicyEnd,
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(10 * ms)})},
			outcome:      always(errBoom),
			wantAttempts: 2,
			wantDelays:   []time.Duration{10 * ms},
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				var ee *StreamEndError
				require.ErrorAs(t, runErr, &ee)
				assert.Equal(t, 1, ee.Position)
				assert.ErrorIs(t, ee, errBoom)
				_, err := next.Wait()
				assert.ErrorIs(t, err, ErrStreamStopped)
				assert.ErrorAs(t, err, &ee)
			},
		},
		{
			name:   "non-retryable error",
			policy: PolicyContinue,
			opts: []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 5, Backoff: ConstantBackoff(10 * ms),
				Retryable: func(err error) bool { return !errors.Is(err, errPermanent) }})},
			outcome: func(k int) error {
				if k == 1 {
					return errBoom
				}
				return errPermanent
			},
			wantAttempts: 2,
			wantDelays:   []time.Duration{10 * ms},
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				require.NoError(t, runErr)
				_, err := node.Wait()
				assert.ErrorIs(t, err, errPermanent)
			},
		},
		{
			name:         "a panic is not retried",
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 3})},
			outcome:      func(int) error { panic(errBoom) },
			wantAttempts: 1,
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				var pe *PanicError
				require.ErrorAs(t, runErr, &pe)
				_, err := node.Wait()
				assert.ErrorAs(t, err, &pe)
				assert.ErrorIs(t, err, errBoom, "a panic with an error unwraps to it")
				_, err = next.Wait()
				assert.ErrorIs(t, err, ErrStreamStopped)
			},
		},
		{
			name: "a panic is retried when Retryable says so",
			opts: []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 3, Retryable: func(error) bool { return true }})},
			outcome: func(k int) error {
				if k == 1 {
					panic("once")
				}
				return nil
			},
			wantAttempts: 2,
			wantDelays:   []time.Duration{0},
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				require.NoError(t, runErr)
				assertValues(t, []int{11, 12}, node, next)
			},
		},
		{
			name:         "a panic in Retryable ends the retries",
			policy:       PolicyContinue,
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 3, Retryable: func(error) bool { panic("bad predicate") }})},
			outcome:      always(errBoom),
			wantAttempts: 1,
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				require.NoError(t, runErr)
				_, err := node.Wait()
				var pe *PanicError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, "bad predicate", pe.Value)
				assert.ErrorIs(t, err, errBoom, "the failed attempt's error, wrapped")
				v, err := next.Wait()
				assert.NoError(t, err)
				assert.Equal(t, 2, v)
			},
		},
		{
			name:         "a panic in Backoff ends the retries",
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 3, Backoff: func(int) time.Duration { panic("bad backoff") }})},
			outcome:      always(errBoom),
			wantAttempts: 1,
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				var pe *PanicError
				require.ErrorAs(t, runErr, &pe)
				assert.Equal(t, "bad backoff", pe.Value)
				assert.ErrorIs(t, runErr, errBoom, "the failed attempt's error, wrapped")
			},
		},
		{
			name:         "one attempt is no retry",
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{Attempts: 1, Backoff: ConstantBackoff(10 * ms)})},
			outcome:      always(errBoom),
			wantAttempts: 1,
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				assert.ErrorIs(t, runErr, errBoom)
			},
		},
		{
			name:         "no options, no retry",
			opts:         []StreamNodeOption{nil},
			outcome:      always(errBoom),
			wantAttempts: 1,
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				assert.ErrorIs(t, runErr, errBoom)
			},
		},
		{
			name:         "fewer than one attempt",
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{})},
			outcome:      always(nil),
			wantAttempts: 0,
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				require.NoError(t, runErr, "the node never joined the stream")
				_, err := node.Wait()
				assert.ErrorIs(t, err, ErrBadRetry)
				assert.ErrorContains(t, err, "stream node: RetryPolicy.Attempts is 0; it counts every attempt, the first included, so it must be at least 1")
				v, err := next.Wait()
				assert.NoError(t, err)
				assert.Equal(t, 2, v)
			},
		},
		{
			name:         "the last option wins",
			opts:         []StreamNodeOption{StreamRetry(RetryPolicy{}), StreamRetry(RetryPolicy{Attempts: 2})},
			outcome:      failUntil(2, errBoom),
			wantAttempts: 2,
			wantDelays:   []time.Duration{0},
			check: func(t *testing.T, runErr error, node, next *StreamNode[int]) {
				require.NoError(t, runErr)
				assertValues(t, []int{11, 12}, node, next)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls []time.Time
				s := NewStream(1)
				node := s.AppendWith(func(_ context.Context, prev int) (int, error) {
					calls = append(calls, time.Now())
					if err := tt.outcome(len(calls)); err != nil {
						return -1, err
					}
					return prev + 10, nil
				}, tt.policy, tt.opts...)
				next := s.Append(addOne)
				ran := runStream(t.Context(), s)
				closeErr := s.Close()
				runErr := <-ran
				assert.Equal(t, runErr, closeErr, "Close returns what Run returned")
				assert.Equal(t, tt.wantAttempts, node.Attempts(), "attempts: got, want")
				assert.Len(t, calls, tt.wantAttempts, "calls")
				var delays []time.Duration
				for k := 1; k < len(calls); k++ {
					delays = append(delays, calls[k].Sub(calls[k-1]))
				}
				assert.Equal(t, tt.wantDelays, delays, "delays between attempts: got, want")
				var pe *PanicError
				if v, err := node.Wait(); err != nil && tt.wantAttempts > 0 && !errors.As(err, &pe) {
					assert.Equal(t, -1, v, "a failed node's value is its last attempt's")
				}
				tt.check(t, runErr, node, next)
			})
		})
	}
}

// TestStreamRetryNilFunc: a nil function fails with ErrNilTask at once;
// calling it again cannot help.
func TestStreamRetryNilFunc(t *testing.T) {
	s := NewStream(0)
	asked := 0 // read after Run returned
	n := s.AppendWith(nil, PolicyContinue, StreamRetry(RetryPolicy{Attempts: 3,
		Retryable: func(error) bool { asked++; return true }}))
	ran := runStream(t.Context(), s)
	require.NoError(t, s.Close())
	require.NoError(t, <-ran)
	_, err := n.Wait()
	assert.ErrorIs(t, err, ErrNilTask)
	assert.Zero(t, n.Attempts(), "attempts")
	assert.Zero(t, asked, "the retry policy was asked about a nil function's failure")
}

// TestStreamRetrySuspendResume: a PolicySuspend node pauses the stream
// only after its last attempt, and a Rerun gives it a new round of
// attempts, as Run.Resume does for a graph node. The node fails its
// first three calls, with two attempts per round: it suspends after
// calls 1 and 2, and after a Rerun fails call 3, is retried, and
// succeeds with call 4.
func TestStreamRetrySuspendResume(t *testing.T) {
	gaveUp := errors.New("gave up")
	tests := []struct {
		name         string
		how          Resumption
		wantAttempts int
		check        func(t *testing.T, runErr error, node, next *StreamNode[int])
	}{
		{"rerun", Rerun(), 4, func(t *testing.T, runErr error, node, next *StreamNode[int]) {
			require.NoError(t, runErr)
			assertValues(t, []int{10, 11}, node, next)
		}},
		{"succeed", SucceedWith(42), 2, func(t *testing.T, runErr error, node, next *StreamNode[int]) {
			require.NoError(t, runErr)
			assertValues(t, []int{42, 43}, node, next)
		}},
		{"fail", FailWith(gaveUp), 2, func(t *testing.T, runErr error, node, next *StreamNode[int]) {
			assert.ErrorIs(t, runErr, gaveUp)
			_, err := next.Wait()
			assert.ErrorIs(t, err, ErrStreamStopped)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls []time.Time
				s := NewStream(0)
				node := s.AppendWith(func(_ context.Context, prev int) (int, error) {
					calls = append(calls, time.Now())
					if len(calls) <= 3 {
						return 0, errFlaky
					}
					return prev + 10, nil
				}, PolicySuspend, StreamRetry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(time.Second)}))
				next := s.Append(addOne)
				ran := runStream(t.Context(), s)
				start := time.Now()
				<-node.Suspended()
				assert.Equal(t, time.Second, time.Since(start), "suspended after one backoff: got, want")
				assert.Equal(t, 2, node.Attempts(), "attempts when suspended")
				select {
				case <-node.Done():
					t.Fatal("a suspended node has ended")
				default:
				}
				time.Sleep(time.Minute) // the pause lasts until Resume
				assert.Equal(t, 2, node.Attempts(), "attempts while suspended")
				require.NoError(t, s.Resume(tt.how))
				closeErr := s.Close()
				runErr := <-ran
				assert.Equal(t, runErr, closeErr, "Close returns what Run returned")
				assert.Equal(t, tt.wantAttempts, node.Attempts(), "attempts: got, want")
				if tt.wantAttempts == 4 {
					assert.Equal(t, time.Second, calls[3].Sub(calls[2]), "backoff in the rerun's round")
				}
				tt.check(t, runErr, node, next)
			})
		})
	}
}

// TestStreamRetryCancelledDuringBackoff cancels Run's context while a
// node waits an hour for its next attempt: Run and Close return at once,
// in fake time, the node ends with its failure and the cause, and no
// goroutine or timer is left (synctest.Test and goleak would see one).
func TestStreamRetryCancelledDuringBackoff(t *testing.T) {
	stopped := errors.New("operator stopped it")
	for _, tt := range []struct {
		name   string
		cancel func(context.CancelCauseFunc)
		want   error
	}{
		{"cancel", func(c context.CancelCauseFunc) { c(nil) }, context.Canceled},
		{"cancel with a cause", func(c context.CancelCauseFunc) { c(stopped) }, stopped},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				s := NewStream(0)
				node := s.AppendWith(func(context.Context, int) (int, error) { return 0, errBoom },
					PolicyContinue, StreamRetry(RetryPolicy{Attempts: 5, Backoff: ConstantBackoff(time.Hour)}))
				next := s.Append(addOne)
				ran := runStream(ctx, s)
				closed := make(chan error, 1)
				go func() { closed <- s.Close() }()
				synctest.Wait() // Run waits for the backoff, Close for Run
				require.Equal(t, 1, node.Attempts(), "attempts before the cancel")
				select {
				case <-closed:
					t.Fatal("Close returned during a backoff")
				default:
				}
				start := time.Now()
				tt.cancel(cancel)
				assert.ErrorIs(t, <-ran, tt.want)
				assert.ErrorIs(t, <-closed, tt.want)
				assert.Zero(t, time.Since(start), "Run waited on after the cancel")
				assert.Equal(t, 1, node.Attempts(), "attempts: got, want")
				_, err := node.Wait()
				assert.ErrorIs(t, err, errBoom, "the node's failure")
				assert.ErrorIs(t, err, tt.want, "the cause")
				_, err = next.Wait()
				assert.ErrorIs(t, err, ErrStreamStopped)
				assert.ErrorIs(t, err, tt.want)
			})
		})
	}
}

// TestStreamRetryNeverPastTheDeadline: as for a graph node, a retry that
// would start at or after Run's deadline is not made, and the failure
// policy applies at once instead of after a useless wait.
func TestStreamRetryNeverPastTheDeadline(t *testing.T) {
	for _, tt := range []struct {
		name         string
		backoff      time.Duration
		wantAttempts int
	}{
		{"backoff ends before the deadline", 30 * time.Second, 2},
		{"backoff ends at the deadline", time.Minute, 1},
		{"backoff ends after the deadline", time.Hour, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				s := NewStream(0)
				start := time.Now()
				node := s.AppendWith(func(context.Context, int) (int, error) { return 0, errBoom },
					PolicyContinue, StreamRetry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(tt.backoff)}))
				var nextAt time.Duration
				next := s.Append(func(_ context.Context, prev int) (int, error) {
					nextAt = time.Since(start)
					return prev + 1, nil
				})
				ran := runStream(ctx, s)
				require.NoError(t, s.Close())
				require.NoError(t, <-ran)
				assert.Equal(t, tt.wantAttempts, node.Attempts(), "attempts: got, want")
				_, err := node.Wait()
				assert.ErrorIs(t, err, errBoom)
				assertValues(t, []int{1}, next)
				assert.Equal(t, time.Duration(tt.wantAttempts-1)*tt.backoff, nextAt, "the next node started after: got, want")
			})
		})
	}
}

// TestStreamRetryGoexit: a node that calls runtime.Goexit is not retried
// (as a graph node's worker is not); the stream stops as it does without
// retries.
func TestStreamRetryGoexit(t *testing.T) {
	s := NewStream(0)
	n := s.AppendWith(func(context.Context, int) (int, error) { runtime.Goexit(); return 0, nil },
		PolicyContinue, StreamRetry(RetryPolicy{Attempts: 3}))
	later := s.Append(addOne)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(t.Context())
	}()
	<-done
	assert.Equal(t, 1, n.Attempts(), "attempts")
	_, err := n.Wait()
	assert.ErrorIs(t, err, ErrGoexit, "the node ran, and failed")
	_, err = later.Wait()
	assert.ErrorIs(t, err, ErrStreamStopped)
	assert.Error(t, s.Close())
}

// TestStreamRetryManyProducers appends, from many goroutines while the
// stream runs, nodes that each fail their first attempt: every node ends
// once, after two attempts, and the chain counts every node.
func TestStreamRetryManyProducers(t *testing.T) {
	const producers, perProducer = 4, 50
	s := NewStream(0)
	ran := runStream(t.Context(), s)
	retry := StreamRetry(RetryPolicy{Attempts: 2})
	nodes := make([][]*StreamNode[int], producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for range perProducer {
				failed := false
				nodes[p] = append(nodes[p], s.AppendWith(func(_ context.Context, prev int) (int, error) {
					if !failed {
						failed = true
						return 0, errFlaky
					}
					return prev + 1, nil
				}, PolicyFail, retry))
			}
		})
	}
	wg.Wait()
	last := s.Append(func(_ context.Context, prev int) (int, error) { return prev, nil })
	require.NoError(t, s.Close())
	require.NoError(t, <-ran)
	for _, ns := range nodes {
		for _, n := range ns {
			_, err := n.Wait()
			assert.NoError(t, err)
			assert.Equal(t, 2, n.Attempts(), "attempts")
		}
	}
	v, err := last.Wait()
	require.NoError(t, err)
	assert.Equal(t, producers*perProducer, v, "nodes counted: got, want")
}
