package mpsc

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestQueueOrder(t *testing.T) {
	var q Queue[int]
	assert.Empty(t, q.TakeAll(nil))
	wasEmpty, ok := q.Push(1)
	assert.True(t, wasEmpty)
	assert.True(t, ok)
	wasEmpty, _ = q.Push(2)
	assert.False(t, wasEmpty)
	q.Push(3)
	assert.Equal(t, []int{-1, 1, 2, 3}, q.TakeAll([]int{-1}), "appended to what buf holds")
	assert.Empty(t, q.TakeAll(nil))
	wasEmpty, _ = q.Push(4)
	assert.True(t, wasEmpty, "queue is empty again after TakeAll")
	assert.Equal(t, []int{4}, q.TakeAll(nil))
}

func TestQueueSeal(t *testing.T) {
	var q Queue[string]
	q.Push("a")
	q.Push("b")
	assert.False(t, q.Sealed())
	assert.Equal(t, []string{"rest", "a", "b"}, q.Seal([]string{"rest"}), "appended to what buf holds")
	assert.True(t, q.Sealed())
	_, ok := q.Push("c")
	assert.False(t, ok)
	assert.Empty(t, q.TakeAll(nil))
	assert.Empty(t, q.Seal(nil))
}

// TestQueueConcurrentProducers checks that nothing is lost or duplicated
// and that each producer's values come out in the order it pushed them.
func TestQueueConcurrentProducers(t *testing.T) {
	const producers, each = 32, 2000
	type item struct{ producer, seq int }
	var q Queue[item]
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				_, ok := q.Push(item{p, i})
				require.True(t, ok)
			}
		})
	}
	next := make([]int, producers)
	total := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var buf []item
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		buf = q.TakeAll(buf[:0])
		for _, it := range buf {
			require.Equal(t, next[it.producer], it.seq, "producer %d out of order", it.producer)
			next[it.producer]++
			total++
		}
		if finished && len(buf) == 0 {
			break
		}
	}
	assert.Equal(t, producers*each, total)
}

func TestQueueSealRacesWithPush(t *testing.T) {
	var q Queue[int]
	var wg sync.WaitGroup
	var accepted [8][]int
	for p := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				if _, ok := q.Push(p*1000 + i); ok {
					accepted[p] = append(accepted[p], p*1000+i)
				}
			}
		})
	}
	got := q.TakeAll(nil)
	got = q.Seal(got)
	wg.Wait()
	want := 0
	for _, a := range accepted {
		want += len(a)
	}
	assert.Len(t, got, want, "every accepted push is taken exactly once")
}

// TestWasEmptyStartsEachBatch stresses concurrent producers against a
// consumer taking batches, then sealing: every accepted value is taken
// exactly once, each producer's in order, and in every batch exactly the
// first (oldest) value was pushed on an empty queue, which is what lets a
// producer that sees wasEmpty wake the consumer, and only one do so.
func TestWasEmptyStartsEachBatch(t *testing.T) {
	const producers, each = 8, 3000
	var q Queue[int]
	var empty [producers * each]atomic.Int32 // 1: pushed on empty, 2: not, 0: refused
	var wg sync.WaitGroup
	var stop atomic.Bool
	var finished atomic.Int32
	for p := range producers {
		wg.Go(func() {
			defer finished.Add(1)
			for i := range each {
				v := p*each + i
				wasEmpty, ok := q.Push(v)
				switch {
				case !ok:
					stop.Store(true)
				case wasEmpty:
					empty[v].Store(1)
				default:
					empty[v].Store(2)
				}
			}
		})
	}
	var batches [][]int
	// Seal after a number of batches, with producers likely still
	// pushing, or once they are all done.
	for len(batches) < 500 && !stop.Load() && finished.Load() < producers {
		if b := q.TakeAll(nil); len(b) > 0 {
			batches = append(batches, b)
		}
	}
	if b := q.Seal(nil); len(b) > 0 {
		batches = append(batches, b)
	}
	wg.Wait()
	seen := make(map[int]bool)
	last := make([]int, producers)
	for p := range last {
		last[p] = -1
	}
	for k, b := range batches {
		for i, v := range b {
			if seen[v] {
				t.Fatalf("value %d taken twice", v)
			}
			seen[v] = true
			p := v / each
			if v <= last[p] {
				t.Fatalf("producer %d: %d after %d", p, v, last[p])
			}
			last[p] = v
			if got, want := empty[v].Load() == 1, i == 0; got != want {
				t.Fatalf("batch %d, item %d (%d): wasEmpty %v", k, i, v, got)
			}
		}
	}
	for v := range empty {
		if accepted := empty[v].Load() != 0; accepted != seen[v] {
			t.Fatalf("value %d: accepted %v, taken %v", v, accepted, seen[v])
		}
	}
}

// TestNoAcceptedPushIsLost races a producer with the consumer's TakeAll
// and Seal in many short rounds, so that pushes land right as the
// consumer empties or seals the queue: every push that reports ok is
// taken exactly once, by TakeAll or by Seal. (One producer, so that on a
// busy machine the producer and the consumer are the goroutines that
// run side by side.)
func TestNoAcceptedPushIsLost(t *testing.T) {
	for round := range 2000 {
		var q Queue[int]
		accepted := 0
		var pushing atomic.Bool // the producer has pushed
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range 1000 {
				if _, ok := q.Push(i); !ok {
					return
				}
				accepted++
				pushing.Store(true)
			}
		})
		for !pushing.Load() {
			runtime.Gosched()
		}
		var got []int
		for range round % 4 {
			got = q.TakeAll(got)
		}
		got = q.Seal(got)
		wg.Wait()
		require.Len(t, got, accepted, "round %d: pushes accepted and taken", round)
		for i, v := range got {
			require.Equal(t, i, v, "round %d: in push order, none twice", round)
		}
	}
}
