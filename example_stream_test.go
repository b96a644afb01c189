package asynctool_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/asynctool-go/asynctool"
)

// A stream fed by many producers: nodes run one after another, each
// receiving the previous node's result, while producers keep appending.
func ExampleStream() {
	s := asynctool.NewStream(0) // the first node receives 0
	ran := make(chan error, 1)
	go func() { ran <- s.Run(context.Background()) }()

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				s.Append(func(_ context.Context, count int) (int, error) {
					return count + 1, nil
				})
			}
		})
	}
	wg.Wait()
	total := s.Append(func(_ context.Context, count int) (int, error) { return count, nil })
	fmt.Println("close:", s.Close()) // waits for the tail
	fmt.Println("run:", <-ran)
	n, err := total.Wait()
	fmt.Println("nodes before the last:", n, err)
	// Output:
	// close: <nil>
	// run: <nil>
	// nodes before the last: 100 <nil>
}

// A failing node stops the stream: later nodes do not run.
func ExampleStream_failStop() {
	s := asynctool.NewStream("")
	s.Append(func(_ context.Context, _ string) (string, error) { return "a", nil })
	s.Append(func(_ context.Context, _ string) (string, error) { return "", fmt.Errorf("disk full") })
	last := s.Append(func(_ context.Context, prev string) (string, error) { return prev + "c", nil })
	fmt.Println("run:", s.Run(context.Background()))
	_, err := last.Wait()
	fmt.Println("last:", err)
	// Output:
	// run: disk full
	// last: asynctool: stream stopped before this node: disk full
}
