// Command batch drains a table of pending tasks page by page, the way a
// job that grants loyalty points for new orders would: pages are fetched
// on the calling goroutine, rows are processed on a bounded pool, and a
// full pool makes the fetcher process rows itself (CallerRuns), which
// slows fetching to the pool's pace. Failed rows are reported, not fatal.
//
//	go run ./examples/batch
package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool"
)

// table is an in-memory stand-in for the async_task table.
type table struct {
	mu   sync.Mutex
	rows []row
}

type row struct {
	id      int
	orderID string
	done    bool
}

var errPaymentPending = errors.New("payment still pending")

func main() {
	t := &table{}
	for i := range 2000 {
		t.rows = append(t.rows, row{id: i, orderID: fmt.Sprintf("order-%05d", i)})
	}

	const pageSize = 100
	var maxInFlight, inFlight atomic.Int64
	fetch := func(_ context.Context, page int) ([]row, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		lo := min(page*pageSize, len(t.rows))
		hi := min(lo+pageSize, len(t.rows))
		return append([]row(nil), t.rows[lo:hi]...), nil
	}
	process := func(ctx context.Context, r row) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(50 * time.Microsecond) // grant the points
		if r.id%97 == 0 {
			return fmt.Errorf("%s: %w", r.orderID, errPaymentPending)
		}
		t.mu.Lock()
		t.rows[r.id].done = true
		t.mu.Unlock()
		return nil
	}

	pool := asynctool.NewPool(asynctool.PoolSize(16), asynctool.PoolQueue(64))
	defer pool.Close()
	start := time.Now()
	report, err := asynctool.RunBatches(context.Background(), pool, fetch, process)
	if err != nil {
		fmt.Println("job stopped:", err)
	}
	fmt.Printf("processed %d rows from %d pages in %v: %d ok, %d failed\n",
		report.Items, report.Pages, time.Since(start).Round(time.Millisecond), report.Succeeded, report.Failed)
	fmt.Printf("at most %d rows in process at once (16 workers + the fetching goroutine)\n", maxInFlight.Load())
	fmt.Printf("rows the fetcher processed itself when the pool was full: %d\n", pool.Stats().CallerRan)
	for _, f := range report.Failures[:3] {
		fmt.Println("  failed:", f)
	}
	fmt.Printf("  ... %d failures in all; errors.Is(payment pending): %v\n",
		len(report.Failures), errors.Is(report.Err(), errPaymentPending))
}
