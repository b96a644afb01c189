package asynctool_test

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/asynctool-go/asynctool"
)

func ExamplePool() {
	pool := asynctool.NewPool(asynctool.PoolSize(4), asynctool.PoolQueue(16))
	var sum atomic.Int64
	for i := 1; i <= 100; i++ {
		// When the 4 workers are busy and 16 tasks wait, the default
		// CallerRuns policy runs the task here: the loop slows down
		// instead of piling up work.
		if err := pool.Submit(func() { sum.Add(int64(i)) }); err != nil {
			fmt.Println(err)
		}
	}
	pool.Close() // runs what is queued and waits for the workers
	fmt.Println("sum:", sum.Load())
	fmt.Println("completed:", pool.Stats().Completed)
	fmt.Println("after Close:", pool.Submit(func() {}))
	// Output:
	// sum: 5050
	// completed: 100
	// after Close: asynctool: pool is closed
}

func ExamplePoolWhenFull() {
	pool := asynctool.NewPool(
		asynctool.PoolSize(1),
		asynctool.PoolQueue(0),
		asynctool.PoolWhenFull(asynctool.Reject),
	)
	defer pool.Close()
	release := make(chan struct{})
	_ = pool.Submit(func() { <-release }) // takes the only worker
	err := pool.Submit(func() {})
	fmt.Println(errors.Is(err, asynctool.ErrPoolFull), pool.Stats().Rejected)
	close(release)
	// Output: true 1
}
