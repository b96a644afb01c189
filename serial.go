package asynctool

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynctool-go/asynctool/internal/mpsc"
)

// SerialOption configures a [Serial] built by [NewSerial] or a [Keyed]
// built by [NewKeyed].
type SerialOption interface {
	applySerial(*serialConfig)
}

type serialConfig struct {
	onPanic func(*PanicError)
}

type serialOptionFunc func(*serialConfig)

func (f serialOptionFunc) applySerial(c *serialConfig) { f(c) }

// SerialPanicHandler installs a function that receives every panic
// recovered from a task, with the panicking goroutine's stack. It is
// called on the goroutine that ran the task, before the next task starts;
// it must not panic itself. Without a handler a task's panic is recovered
// and only counted in the Panicked field of the stats; either way the
// tasks after it still run.
func SerialPanicHandler(h func(*PanicError)) SerialOption {
	return serialOptionFunc(func(c *serialConfig) { c.onPanic = h })
}

// SerialStats is a snapshot of a [Serial]'s or a [Keyed]'s counters. The
// fields are read one by one while tasks run, so they need not add up
// exactly.
type SerialStats struct {
	// Pending is the number of tasks submitted and not yet finished or
	// dropped, including the one running. For a Keyed it is not tracked
	// and is always 0; see Keys.
	Pending int
	// Keys is, for a [Keyed], the number of keys with tasks pending. It
	// is 0 for a Serial.
	Keys int
	// Delayed is the number of tasks waiting for their delay to pass.
	Delayed int
	// Completed is the number of tasks that have run, including those
	// that panicked.
	Completed uint64
	// Dropped is the number of tasks that Close discarded before they
	// ran: queued tasks and cancelled delayed tasks.
	Dropped uint64
	// Panicked is the number of tasks that panicked.
	Panicked uint64
}

// Serial runs the tasks submitted to it one at a time, in the order they
// were submitted, on goroutines borrowed from an [Executor]. Tasks
// submitted from one goroutine run in that goroutine's order; tasks
// submitted concurrently run in the order their Submit calls took effect.
// Each task sees the memory effects of the tasks before it.
//
// Serial holds no goroutine while it has nothing to do. The submitter
// whose task makes the work-in-progress counter go from 0 to 1 hands a
// drain loop to the executor; the loop runs tasks until the counter is
// back to 0, then returns the goroutine to the executor. Submitting is
// lock-free: one compare-and-swap to link the task, one atomic add.
//
// If the executor refuses the drain loop (a closed or full [Pool] under
// [Reject]), the loop runs on a new goroutine instead, so that no task is
// lost. If the executor runs tasks on the caller ([CallerRuns]), the
// submitter whose task started the loop runs it, including tasks other
// goroutines submit meanwhile.
//
// A task that panics does not stop the loop: see [SerialPanicHandler].
//
// [Serial.Close] drops the tasks still queued rather than running them;
// to finish queued work, wait for it (with a sync.WaitGroup, or a last
// task that signals) before calling Close.
//
// A Serial is safe for concurrent use. It must be created with
// [NewSerial] and must not be copied after first use.
type Serial struct {
	exec    Executor
	onPanic func(*PanicError)
	drainFn func() // s.drain, allocated once

	q      mpsc.Queue[serialItem]
	wip    atomic.Int64 // tasks pushed and not yet consumed by the drain loop
	closed atomic.Bool

	// Owned by the drain loop, which runs on one goroutine at a time.
	pending []serialItem
	next    int

	completed atomic.Uint64
	dropped   atomic.Uint64
	panicked  atomic.Uint64

	mu        sync.Mutex // guards delayed
	delayed   map[*delayedTask]struct{}
	timers    sync.WaitGroup // timer callbacks that have not finished
	closeOnce sync.Once
}

// serialItem is a task, or Close's marker when closed is non-nil.
type serialItem struct {
	fn     func()
	closed chan struct{}
}

// NewSerial returns a Serial that runs its drain loop on exec. A nil exec
// means [GoExecutor].
func NewSerial(exec Executor, opts ...SerialOption) *Serial {
	var c serialConfig
	for _, o := range opts {
		o.applySerial(&c)
	}
	if exec == nil {
		exec = GoExecutor{}
	}
	s := &Serial{exec: exec, onPanic: c.onPanic}
	s.drainFn = s.drain
	return s
}

// Submit queues task to run after every task submitted before it. It
// returns [ErrSerialClosed] after Close, [ErrNilTask] for a nil task, and
// otherwise nil: the task then runs exactly once, unless Close drops it
// first. Submit may be called from inside a task; the new task runs after
// the current one returns.
func (s *Serial) Submit(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	if s.closed.Load() {
		return ErrSerialClosed
	}
	s.push(serialItem{fn: task})
	return nil
}

// SubmitAfter queues task once d has passed; it then runs in order with
// the tasks submitted by then. No goroutine waits meanwhile (the delay is
// a runtime timer). cancel stops the task from being queued and reports
// whether it did so; it is safe to call more than once and from any
// goroutine. A d <= 0 submits task at once, and cancel then always
// reports false. SubmitAfter returns the same errors as [Serial.Submit].
func (s *Serial) SubmitAfter(d time.Duration, task func()) (cancel func() bool, err error) {
	if task == nil {
		return nil, ErrNilTask
	}
	if d <= 0 {
		return func() bool { return false }, s.Submit(task)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrSerialClosed
	}
	t := &delayedTask{s: s, fn: task}
	if s.delayed == nil {
		s.delayed = make(map[*delayedTask]struct{})
	}
	s.delayed[t] = struct{}{}
	s.timers.Add(1)
	t.timer = time.AfterFunc(d, t.fire)
	return t.cancel, nil
}

// delayedTask is a task waiting for its timer. It is in s.delayed until
// it fires, is cancelled or is dropped by Close, whichever comes first.
type delayedTask struct {
	s     *Serial
	fn    func()
	timer *time.Timer
}

func (t *delayedTask) fire() {
	defer t.s.timers.Done()
	t.s.mu.Lock()
	_, ok := t.s.delayed[t]
	delete(t.s.delayed, t)
	t.s.mu.Unlock()
	if ok {
		t.s.push(serialItem{fn: t.fn})
	}
}

func (t *delayedTask) cancel() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if _, ok := t.s.delayed[t]; !ok {
		return false
	}
	delete(t.s.delayed, t)
	if t.timer.Stop() {
		t.s.timers.Done() // fire will not run
	}
	return true
}

// push links it and starts the drain loop if no loop is running.
func (s *Serial) push(it serialItem) {
	s.q.Push(it)
	if s.wip.Add(1) == 1 {
		s.schedule()
	}
}

// schedule starts the drain loop. After Close the loop only drops tasks,
// which is quick, so it runs on the calling goroutine.
func (s *Serial) schedule() {
	if s.closed.Load() {
		s.drain()
		return
	}
	if s.exec.Submit(s.drainFn) != nil {
		go s.drain()
	}
}

// drain runs queued tasks until wip drops to 0.
//
// wip counts items pushed and not yet consumed. A loop takes every item
// linked so far (possibly some whose submitter has not yet incremented
// wip), runs them, and subtracts their number. While a loop runs, wip
// stays at least 1, so no second loop starts; when the subtraction
// leaves wip at 0 or below, every linked item was consumed, and the next
// increment that takes wip from 0 to 1 starts a new loop.
func (s *Serial) drain() {
	normal := false
	defer func() {
		if !normal {
			// A task called runtime.Goexit; it counts as completed.
			// Carry on from the next item in a new loop; wip still
			// counts the rest.
			s.completed.Add(1)
			s.schedule()
		}
	}()
	for {
		if s.next == len(s.pending) {
			n := len(s.pending)
			s.pending, s.next = s.pending[:0], 0
			if n > 0 && s.wip.Add(-int64(n)) <= 0 {
				normal = true
				return
			}
			s.pending = s.q.TakeAll(s.pending)
		}
		it := s.pending[s.next]
		s.pending[s.next] = serialItem{}
		s.next++
		switch {
		case it.closed != nil:
			close(it.closed)
		case s.closed.Load():
			s.dropped.Add(1)
		default:
			if runTask(it.fn, s.onPanic) {
				s.panicked.Add(1)
			}
			s.completed.Add(1)
		}
	}
}

// Close stops the Serial: Submit and SubmitAfter return [ErrSerialClosed]
// from then on, delayed tasks are cancelled, and tasks still queued are
// dropped, not run (both are counted in [SerialStats.Dropped]). Close
// waits for the task that is running, if any, to return. Close is
// idempotent. It must not be called from inside one of the Serial's
// tasks, which would wait for itself.
func (s *Serial) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed.Store(true)
		for t := range s.delayed {
			delete(s.delayed, t)
			if t.timer.Stop() {
				s.timers.Done()
			}
			s.dropped.Add(1)
		}
		s.mu.Unlock()
		s.timers.Wait() // timer callbacks that were already running
		done := make(chan struct{})
		s.push(serialItem{closed: done})
		<-done
	})
}

// Stats returns a snapshot of the Serial's counters.
func (s *Serial) Stats() SerialStats {
	s.mu.Lock()
	delayed := len(s.delayed)
	s.mu.Unlock()
	return SerialStats{
		Pending:   int(max(s.wip.Load(), 0)),
		Delayed:   delayed,
		Completed: s.completed.Load(),
		Dropped:   s.dropped.Load(),
		Panicked:  s.panicked.Load(),
	}
}

// runTask runs task, recovering a panic and passing it to onPanic if that
// is not nil. It reports whether task panicked.
func runTask(task func(), onPanic func(*PanicError)) (panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			panicked = true
			if onPanic != nil {
				onPanic(newPanicError(r))
			}
		}
	}()
	task()
	return false
}
