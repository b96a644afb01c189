// Command stream feeds one append-only [asynctool.Stream] from many
// producers. Each node extends a ledger it receives from the node before
// it: a count, a running checksum of every line so far, and the last line
// number seen from each producer, which shows that each producer's nodes
// ran in the order it appended them.
//
//	go run ./examples/stream
package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"time"

	"github.com/asynctool-go/asynctool"
)

const producers, perProducer = 16, 500

// ledger is the value passed from node to node.
type ledger struct {
	entries    int
	crc        uint32
	last       [producers]int // last line number seen per producer, plus one
	outOfOrder int
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	s := asynctool.NewStream(ledger{})
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()

	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				line := fmt.Sprintf("producer %d line %d\n", p, i)
				s.Append(func(_ context.Context, l ledger) (ledger, error) {
					if l.last[p] != i {
						l.outOfOrder++
					}
					l.last[p] = i + 1
					l.entries++
					l.crc = crc32.Update(l.crc, crc32.IEEETable, []byte(line))
					return l, nil
				})
			}
		})
	}
	wg.Wait()
	tail := s.Append(func(_ context.Context, prev ledger) (ledger, error) { return prev, nil })
	if err := s.Close(); err != nil { // waits for the tail
		fmt.Fprintln(os.Stderr, "stream stopped:", err)
		os.Exit(1)
	}
	<-ran
	final, _ := tail.Wait()
	fmt.Printf("%d producers appended %d nodes; %d ran in one chain in %v\n",
		producers, producers*perProducer, final.entries, time.Since(start).Round(time.Millisecond))
	fmt.Printf("producer order violations: %d; checksum of the chain: %08x (depends on the interleaving)\n",
		final.outOfOrder, final.crc)

	late := s.Append(func(_ context.Context, prev ledger) (ledger, error) { return prev, nil })
	_, err := late.Wait()
	fmt.Println("append after Close:", err)
}
