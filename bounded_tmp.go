package asynctool

import "sync"

// boundedExecutor is a stand-in until Pool lands: at most n tasks at once,
// one goroutine per task, trySubmit refuses when full.
type boundedExecutor struct {
	sem chan struct{}
	wg  sync.WaitGroup
}

func newBoundedExecutor(n int) *boundedExecutor {
	return &boundedExecutor{sem: make(chan struct{}, n)}
}

func (b *boundedExecutor) trySubmit(task func()) bool {
	select {
	case b.sem <- struct{}{}:
	default:
		return false
	}
	b.wg.Add(1)
	go func() {
		defer func() { <-b.sem; b.wg.Done() }()
		task()
	}()
	return true
}

func (b *boundedExecutor) Submit(task func()) error {
	if !b.trySubmit(task) {
		task()
	}
	return nil
}

func (b *boundedExecutor) Close() error { b.wg.Wait(); return nil }
