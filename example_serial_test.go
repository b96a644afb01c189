package asynctool_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/asynctool-go/asynctool"
)

func ExampleSerial() {
	pool := asynctool.NewPool()
	defer pool.Close()
	s := asynctool.NewSerial(pool)
	var wg sync.WaitGroup
	for _, step := range []string{"open", "write", "flush", "close"} {
		wg.Add(1)
		// Tasks run one at a time, in submission order, on the pool's
		// goroutines; no goroutine is held while the queue is empty.
		_ = s.Submit(func() { fmt.Println(step); wg.Done() })
	}
	wg.Wait()
	s.Close()
	// Output:
	// open
	// write
	// flush
	// close
}

func ExampleSerial_SubmitAfter() {
	s := asynctool.NewSerial(nil)
	defer s.Close()
	done := make(chan struct{})
	cancel, _ := s.SubmitAfter(time.Hour, func() { fmt.Println("never") })
	fmt.Println("cancelled:", cancel())
	_, _ = s.SubmitAfter(time.Millisecond, func() { fmt.Println("later"); close(done) })
	<-done
	// Output:
	// cancelled: true
	// later
}

// Shutdown lets the accepted tasks run, delayed ones included, and
// refuses new ones; Close would drop them.
func ExampleSerial_Shutdown() {
	s := asynctool.NewSerial(nil)
	_ = s.Submit(func() { fmt.Println("queued") })
	_, _ = s.SubmitAfter(10*time.Millisecond, func() { fmt.Println("delayed") })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Println("shutdown:", s.Shutdown(ctx))
	fmt.Println("after:", s.Submit(func() {}))
	// Output:
	// queued
	// delayed
	// shutdown: <nil>
	// after: asynctool: serial executor is closed
}

// Per-user ordered processing: each user's events are applied in the
// order they arrived, different users in parallel on one shared pool.
func ExampleKeyed() {
	pool := asynctool.NewPool(asynctool.PoolSize(8))
	defer pool.Close()
	users := asynctool.NewKeyed[string](pool)

	type event struct {
		user   string
		amount int
	}
	events := []event{
		{"ann", +100}, {"bob", +50}, {"ann", -30}, {"cid", +10},
		{"bob", -50}, {"ann", -70}, {"cid", +5}, {"bob", +1},
	}
	var mu sync.Mutex
	balances := map[string][]int{} // each user's balance after each event
	var wg sync.WaitGroup
	for _, e := range events {
		wg.Add(1)
		_ = users.Submit(e.user, func() {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			h := balances[e.user]
			last := 0
			if len(h) > 0 {
				last = h[len(h)-1]
			}
			balances[e.user] = append(h, last+e.amount)
		})
	}
	wg.Wait()
	users.Close()
	for _, u := range slices.Sorted(maps.Keys(balances)) {
		fmt.Println(u, balances[u])
	}
	// Output:
	// ann [100 70 0]
	// bob [50 0 1]
	// cid [10 15]
}
