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
	for _, e := range events {
		_ = users.Submit(e.user, func() {
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
	// Shutdown runs every event accepted and refuses new ones; Close
	// would drop those still queued.
	if err := users.Shutdown(context.Background()); err != nil {
		fmt.Println(err)
	}
	for _, u := range slices.Sorted(maps.Keys(balances)) {
		fmt.Println(u, balances[u])
	}
	// Output:
	// ann [100 70 0]
	// bob [50 0 1]
	// cid [10 15]
}

// A delayed task per key: Keyed has no SubmitAfter, so a timer submits
// the task when it is due. Shutdown does not know about such timers: wait
// for them (stopping those no longer wanted) before calling it, or a timer
// that fires after Shutdown has begun gets ErrSerialClosed and its task
// never runs.
func ExampleKeyed_delayed() {
	users := asynctool.NewKeyed[string](nil)
	var timers sync.WaitGroup
	// after submits task for user once d has passed; its cancel works
	// until then.
	after := func(d time.Duration, user string, task func()) (cancel func() bool) {
		timers.Add(1)
		t := time.AfterFunc(d, func() {
			defer timers.Done()
			if err := users.Submit(user, task); err != nil {
				fmt.Println(err)
			}
		})
		return func() bool {
			if t.Stop() {
				timers.Done()
				return true
			}
			return false
		}
	}
	_ = users.Submit("ann", func() { fmt.Println("ann: order placed") })
	after(10*time.Millisecond, "ann", func() { fmt.Println("ann: payment reminder") })
	cancel := after(time.Hour, "ann", func() { fmt.Println("ann: never") })
	cancelled := cancel()

	timers.Wait() // every timer has submitted its task or was stopped
	fmt.Println("shutdown:", users.Shutdown(context.Background()))
	fmt.Println("cancelled:", cancelled)
	// Output:
	// ann: order placed
	// ann: payment reminder
	// shutdown: <nil>
	// cancelled: true
}
