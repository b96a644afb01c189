package mpsc

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestS18GWasEmptyStartsEachBatch stresses concurrent producers against a
// consumer taking batches, then sealing: every accepted value is taken
// exactly once, each producer's in order, and in every batch exactly the
// first (oldest) value was pushed on an empty queue, which is what lets a
// producer that sees wasEmpty wake the consumer, and only one do so.
func TestS18GWasEmptyStartsEachBatch(t *testing.T) {
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
