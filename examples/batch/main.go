// Command batch drains a table of pending tasks page by page, the way a
// job that grants loyalty points for new orders would: pages are fetched
// on the calling goroutine, rows are processed on a bounded pool, and a
// full pool makes the fetcher process rows itself (CallerRuns), which
// slows fetching to the pool's pace. Failed rows are reported, not fatal.
//
// Each fetch claims the next pending rows, as an UPDATE that sets the
// status from pending to handling, with this job as the owner, would: a
// row is processed once even when several jobs drain the table, and
// rows still in process when the next page is fetched are not fetched
// again. A fetch by offset (page × size) over the pending rows would skip
// rows, since the rows before them leave that set as they are processed.
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

type status int

const (
	pending status = iota
	handling
	done
	failed
)

type row struct {
	id      int
	orderID string
	status  status
	owner   string
}

// claim marks up to n pending rows as handled by owner and returns them:
// UPDATE async_task SET status = handling, owner = ? WHERE status =
// pending LIMIT n, then SELECT the rows the owner holds.
func (t *table) claim(owner string, n int) []row {
	t.mu.Lock()
	defer t.mu.Unlock()
	var claimed []row
	for i := range t.rows {
		if len(claimed) == n {
			break
		}
		if r := &t.rows[i]; r.status == pending {
			r.status, r.owner = handling, owner
			claimed = append(claimed, *r)
		}
	}
	return claimed
}

func (t *table) finish(id int, s status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows[id].status = s
}

var errPaymentPending = errors.New("payment still pending")

func main() {
	t := &table{}
	for i := range 2000 {
		t.rows = append(t.rows, row{id: i, orderID: fmt.Sprintf("order-%05d", i)})
	}

	const pageSize = 100
	var maxInFlight, inFlight atomic.Int64
	fetch := func(_ context.Context, _ int) ([]row, error) {
		return t.claim("job-1", pageSize), nil // empty once none is pending: the job stops
	}
	process := func(ctx context.Context, r row) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(50 * time.Microsecond) // grant the points
		if r.id%97 == 0 {
			t.finish(r.id, failed) // or back to pending, for a later run
			return fmt.Errorf("%s: %w", r.orderID, errPaymentPending)
		}
		t.finish(r.id, done)
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
	left := 0
	for _, r := range t.rows {
		if r.status == pending || r.status == handling {
			left++
		}
	}
	fmt.Printf("rows left pending or in process: %d\n", left)
}
