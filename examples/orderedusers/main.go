// Command orderedusers applies account events in order per user while
// many goroutines deliver them, on one shared bounded pool: a
// [asynctool.Keyed] keyed by user id gives per-user order without a lock
// per user or a goroutine per user.
//
//	go run ./examples/orderedusers
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/asynctool-go/asynctool"
)

const (
	users      = 500
	deliverers = 64
	perUser    = 40 // events per user
)

// account is touched only by its user's tasks, which never overlap, so it
// needs no lock.
type account struct {
	balance  int
	nextSeq  int // the sequence number the next event must carry
	outOfOrd int
}

func main() {
	pool := asynctool.NewPool(asynctool.PoolSize(8), asynctool.PoolQueue(256))
	defer pool.Close()
	byUser := asynctool.NewKeyed[int](pool)

	accounts := make([]account, users)
	start := time.Now()

	// Each deliverer owns a slice of the users and sends their events in
	// sequence, interleaved with everybody else's.
	var wg sync.WaitGroup
	for d := range deliverers {
		wg.Go(func() {
			for seq := range perUser {
				for u := d; u < users; u += deliverers {
					amount := 10
					if seq%2 == 1 {
						amount = -10 // a withdrawal must follow its deposit
					}
					err := byUser.Submit(u, func() {
						a := &accounts[u]
						if seq != a.nextSeq {
							a.outOfOrd++
						}
						a.nextSeq = seq + 1
						a.balance += amount
					})
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
				}
			}
		})
	}
	wg.Wait()
	// Shutdown runs every event accepted before it and refuses new ones
	// (Close would drop those still queued).
	if err := byUser.Shutdown(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	outOfOrder, wrong := 0, 0
	for _, a := range accounts {
		outOfOrder += a.outOfOrd
		if a.balance != 0 || a.nextSeq != perUser {
			wrong++
		}
	}
	ps, ks := pool.Stats(), byUser.Stats()
	fmt.Printf("%d events for %d users from %d goroutines in %v\n",
		users*perUser, users, deliverers, time.Since(start).Round(time.Millisecond))
	fmt.Printf("applied %d, out of order %d, wrong final balances %d\n", ks.Completed, outOfOrder, wrong)
	// A Keyed hands the pool one drain loop per key with events waiting,
	// not one task per event: when the pool is full, the submitter runs
	// that key's loop itself (CallerRuns), events submitted meanwhile
	// for the key included.
	fmt.Printf("pool: at most 8 workers; drain loops run by submitters when the pool was full: %d; keys left: %d\n",
		ps.CallerRan, ks.Keys)
}
