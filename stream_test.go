package asynctool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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
	_, err := n.Wait()
	assert.ErrorIs(t, err, ErrStreamStopped)
	_, err = later.Wait()
	assert.ErrorIs(t, err, ErrStreamStopped)
	assert.Error(t, s.Close())
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
