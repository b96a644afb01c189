package mpsc

import (
	"sync"
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
	assert.Equal(t, []int{0, 1, 2, 3}, q.TakeAll([]int{0}))
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
	assert.Equal(t, []string{"a", "b"}, q.Seal(nil))
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
