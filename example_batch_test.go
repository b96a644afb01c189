package asynctool_test

import (
	"context"
	"fmt"

	"github.com/asynctool-go/asynctool"
)

// A batch job over a paged source: pages are fetched while earlier items
// are still processed, as fast as the pool allows, and a failing item is
// reported without stopping the job.
func ExampleRunBatches() {
	// rows stands in for a source that does not change as its items are
	// processed, which can be read by page number. A table of pending
	// tasks changes: its fetch claims the rows it returns (see
	// RunBatches, and examples/batch).
	rows := make([]int, 25)
	for i := range rows {
		rows[i] = 100 + i
	}
	fetch := func(_ context.Context, page int) ([]int, error) {
		const size = 10
		lo, hi := min(page*size, len(rows)), min((page+1)*size, len(rows))
		return rows[lo:hi], nil // empty once past the end: the job stops
	}
	process := func(_ context.Context, id int) error {
		if id == 113 {
			return fmt.Errorf("row %d: bad data", id)
		}
		return nil
	}

	pool := asynctool.NewPool(asynctool.PoolSize(4), asynctool.PoolQueue(8))
	defer pool.Close()
	report, err := asynctool.RunBatches(context.Background(), pool, fetch, process)
	fmt.Println("err:", err)
	fmt.Printf("pages=%d items=%d ok=%d failed=%d\n", report.Pages, report.Items, report.Succeeded, report.Failed)
	fmt.Println(report.Err())
	// Output:
	// err: <nil>
	// pages=3 items=25 ok=24 failed=1
	// asynctool: page 1 item 3: row 113: bad data
}
