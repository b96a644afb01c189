package benchmarks

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/asynctool-go/asynctool"
)

// serialRunner is one way to run tasks one at a time in submission order.
type serialRunner interface {
	Submit(task func()) error
	Close()
}

// mutexSerial is the textbook alternative to asynctool.Serial: the same
// queue drain (no goroutine while idle), with a mutex-protected slice as
// the intake instead of a lock-free one.
type mutexSerial struct {
	mu      sync.Mutex
	queue   []func()
	spare   []func()
	running bool
}

func (s *mutexSerial) Submit(task func()) error {
	s.mu.Lock()
	s.queue = append(s.queue, task)
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go s.drain()
	}
	return nil
}

func (s *mutexSerial) drain() {
	for {
		s.mu.Lock()
		batch := s.queue
		if len(batch) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.queue, s.spare = s.spare[:0], nil
		s.mu.Unlock()
		for i, t := range batch {
			t()
			batch[i] = nil
		}
		s.mu.Lock()
		s.spare = batch[:0]
		s.mu.Unlock()
	}
}

func (s *mutexSerial) Close() {}

// chanSerial is the other usual alternative: a dedicated goroutine
// reading a buffered channel, held for the runner's whole life.
type chanSerial struct {
	ch   chan func()
	done chan struct{}
}

func newChanSerial() *chanSerial {
	s := &chanSerial{ch: make(chan func(), 1024), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for t := range s.ch {
			t()
		}
	}()
	return s
}

func (s *chanSerial) Submit(task func()) error { s.ch <- task; return nil }
func (s *chanSerial) Close()                   { close(s.ch); <-s.done }

// BenchmarkSerial submits tasks from producers goroutines to a serial
// runner and waits until the last one has run. One op is the whole batch;
// ns/task is reported too.
func BenchmarkSerial(b *testing.B) {
	const tasks = 1000
	impls := []struct {
		name string
		make func() (serialRunner, func())
	}{
		{"serial-pool", func() (serialRunner, func()) {
			p := asynctool.NewPool()
			return asynctool.NewSerial(p), func() { _ = p.Close() }
		}},
		{"serial-go", func() (serialRunner, func()) { return asynctool.NewSerial(nil), func() {} }},
		{"mutex-slice", func() (serialRunner, func()) { return &mutexSerial{}, func() {} }},
		{"chan-goroutine", func() (serialRunner, func()) { return newChanSerial(), func() {} }},
	}
	for _, impl := range impls {
		for _, producers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("impl=%s/producers=%d/tasks=%d", impl.name, producers, tasks), func(b *testing.B) {
				s, stop := impl.make()
				defer stop()
				defer s.Close()
				count := 0 // touched only by tasks, which are serial
				inc := func() { count++ }
				b.ReportAllocs()
				for b.Loop() {
					var wg sync.WaitGroup
					for p := range producers {
						wg.Go(func() {
							for i := p; i < tasks; i += producers {
								_ = s.Submit(inc)
							}
						})
					}
					wg.Wait()
					done := make(chan struct{})
					_ = s.Submit(func() { close(done) })
					<-done
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
				if count != b.N*tasks {
					b.Fatalf("ran %d tasks, want %d", count, b.N*tasks)
				}
			})
		}
	}
}

// spin does about work iterations of CPU work that the compiler cannot
// remove.
//
//go:noinline
func spin(work int) int {
	x := 0
	for i := range work {
		x += i ^ (x >> 3)
	}
	return x
}

// BenchmarkPool runs tasks tasks, each doing work units of CPU work, and
// waits for all of them: on asynctool.Pool (CallerRuns, warm workers), on
// a plain go statement per task, and on an errgroup with the same limit
// as the pool.
func BenchmarkPool(b *testing.B) {
	const tasks = 1000
	limit := 4 * runtime.GOMAXPROCS(0)
	var sink [64]int // one slot per task index mod 64; racy writes avoided by wg
	type runner func(task func(i int))
	impls := []struct {
		name string
		make func() (runner, func())
	}{
		{"pool", func() (runner, func()) {
			p := asynctool.NewPool(asynctool.PoolSize(limit))
			var wg sync.WaitGroup
			return func(task func(int)) {
				for i := range tasks {
					wg.Add(1)
					_ = p.Submit(func() { task(i); wg.Done() })
				}
				wg.Wait()
			}, func() { _ = p.Close() }
		}},
		{"go", func() (runner, func()) {
			var wg sync.WaitGroup
			return func(task func(int)) {
				for i := range tasks {
					wg.Add(1)
					go func() { task(i); wg.Done() }()
				}
				wg.Wait()
			}, func() {}
		}},
		{"errgroup", func() (runner, func()) {
			return func(task func(int)) {
				var g errgroup.Group
				g.SetLimit(limit)
				for i := range tasks {
					g.Go(func() error { task(i); return nil })
				}
				_ = g.Wait()
			}, func() {}
		}},
	}
	for _, impl := range impls {
		for _, work := range []int{0, 1000} {
			b.Run(fmt.Sprintf("impl=%s/work=%d/tasks=%d", impl.name, work, tasks), func(b *testing.B) {
				run, stop := impl.make()
				defer stop()
				var mu sync.Mutex
				task := func(i int) {
					if work == 0 {
						return
					}
					v := spin(work)
					if v == -1 { // never true; keeps spin's result alive
						mu.Lock()
						sink[i%64] = v
						mu.Unlock()
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					run(task)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
			})
		}
	}
}
