package asynctool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// A node appended with PolicySuspend pauses the stream when it fails;
// Resume decides what happens next, here running it again.
func ExampleStream_Resume() {
	s := asynctool.NewStream(0)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(context.Background()) }()

	tries := 0
	fetch := s.AppendWith(func(_ context.Context, n int) (int, error) {
		tries++
		if tries == 1 {
			return 0, errors.New("service unavailable")
		}
		return n + 10, nil
	}, asynctool.PolicySuspend)
	after := s.Append(func(_ context.Context, n int) (int, error) { return n + 1, nil })

	<-fetch.Suspended() // the stream is paused; after waits
	fmt.Println("resume:", s.Resume(asynctool.Rerun()))
	fmt.Println("close:", s.Close())
	fmt.Println("run:", <-ran)
	v, err := fetch.Wait()
	fmt.Println("fetch:", v, err, "after", tries, "tries")
	v, err = after.Wait()
	fmt.Println("after:", v, err)
	fmt.Println("resume again:", s.Resume(asynctool.Rerun()))
	// Output:
	// resume: <nil>
	// close: <nil>
	// run: <nil>
	// fetch: 10 <nil> after 2 tries
	// after: 11 <nil>
	// resume again: asynctool: node is not pending: the stream is not suspended
}

// A node appended with PolicyContinue records its failure and the stream
// goes on: the next node receives the last successful result.
func ExampleStream_continue() {
	s := asynctool.NewStream("")
	s.Append(func(_ context.Context, prev string) (string, error) { return prev + "a", nil })
	bad := s.AppendWith(func(_ context.Context, _ string) (string, error) {
		return "", errors.New("bad record")
	}, asynctool.PolicyContinue)
	last := s.Append(func(_ context.Context, prev string) (string, error) { return prev + "c", nil })
	ran := make(chan error, 1)
	go func() { ran <- s.Run(context.Background()) }()
	fmt.Println("close:", s.Close(), "run:", <-ran)
	_, err := bad.Wait()
	fmt.Println("bad:", err)
	v, err := last.Wait()
	fmt.Println("last:", v, err)
	// Output:
	// close: <nil> run: <nil>
	// bad: bad record
	// last: ac <nil>
}

// A node with StreamRetry is called again when it fails, after the
// backoff, and counts as failed only once its last attempt failed; its
// failure policy applies then. An error Retryable refuses is not retried.
func ExampleStream_retry() {
	s := asynctool.NewStream(0)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(context.Background()) }()

	calls := 0
	fetch := s.AppendWith(func(_ context.Context, n int) (int, error) {
		calls++
		if calls < 3 {
			return 0, errors.New("service unavailable")
		}
		return n + 10, nil
	}, asynctool.PolicyFail, asynctool.StreamRetry(asynctool.RetryPolicy{
		Attempts: 3,
		Backoff:  asynctool.ConstantBackoff(time.Millisecond),
	}))

	errNotFound := errors.New("not found")
	lookup := s.AppendWith(func(context.Context, int) (int, error) {
		return 0, errNotFound
	}, asynctool.PolicyContinue, asynctool.StreamRetry(asynctool.RetryPolicy{
		Attempts:  5,
		Retryable: func(err error) bool { return !errors.Is(err, errNotFound) },
	}))
	after := s.Append(func(_ context.Context, n int) (int, error) { return n + 1, nil })

	fmt.Println("close:", s.Close(), "run:", <-ran)
	v, err := fetch.Wait()
	fmt.Println("fetch:", v, err, "after", fetch.Attempts(), "attempts")
	_, err = lookup.Wait()
	fmt.Println("lookup:", err, "after", lookup.Attempts(), "attempt")
	v, err = after.Wait()
	fmt.Println("after:", v, err)
	// Output:
	// close: <nil> run: <nil>
	// fetch: 10 <nil> after 3 attempts
	// lookup: not found after 1 attempt
	// after: 11 <nil>
}
