package asynctool

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// SerialOption configures a [Serial] built by [NewSerial] or a [Keyed]
// built by [NewKeyed]. A nil SerialOption does nothing.
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
// called on the goroutine that ran the task, before the next task starts
// (for a [Keyed], the key's next task: tasks of different keys run in
// parallel, so a Keyed's handler may be called from several goroutines
// at once); it must not panic itself. Without a handler a task's panic
// is recovered and only counted in the Panicked field of the stats;
// either way the tasks after it still run.
func SerialPanicHandler(h func(*PanicError)) SerialOption {
	return serialOptionFunc(func(c *serialConfig) { c.onPanic = h })
}

// SerialStats is a snapshot of a [Serial]'s or a [Keyed]'s counters. The
// fields are read one by one while tasks run, so they need not add up
// exactly.
type SerialStats struct {
	// Queued is, for a [Serial], the number of tasks submitted and not
	// yet taken by the drain loop, which takes them in batches, including
	// tasks cancelled while queued that the loop has not yet passed. It
	// is 0 for a Keyed; see Keys.
	Queued int
	// Keys is, for a [Keyed], the number of keys with tasks pending. It
	// is 0 for a Serial.
	Keys int
	// Delayed is the number of tasks of [Serial.SubmitAfter] waiting
	// for their delay to pass. It is 0 for a Keyed, which has no
	// SubmitAfter.
	Delayed int
	// Completed is the number of tasks that have run, including those
	// that panicked or called runtime.Goexit.
	Completed uint64
	// Dropped is the number of tasks that Close, or a Shutdown whose ctx
	// ended, discarded before they ran: queued tasks and delayed tasks.
	Dropped uint64
	// Cancelled is the number of tasks stopped by the cancel function
	// that [Serial.SubmitAfter] returned. It is 0 for a Keyed.
	Cancelled uint64
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
// whose task finds the Serial idle hands a drain loop to the executor;
// the loop takes the queued tasks in batches and runs them until the
// queue is empty, then marks the Serial idle and returns the goroutine to
// the executor. Submitting costs one short critical section and no
// allocation (amortised); a lock-free intake measured slower, see
// docs/executors-bench.md. That is because the queue's buffers are
// kept: they grow to the longest queue the Serial has had and do not
// shrink, so after a burst of n tasks the Serial keeps n slots (each
// cleared as its task is taken, so no task is kept alive) until it is
// dropped. Likewise the heap of tasks waiting for their delay keeps one
// pointer's room for each of the most tasks that have waited at once,
// until Close or until the Serial is dropped.
//
// If the executor refuses the drain loop (a closed or full [Pool] under
// [Reject]), the loop runs on a new goroutine instead, so that no task is
// lost; so it does if the executor's Submit panics, and the panic then
// goes on up the stack of the Submit that started the loop (for a task of
// SubmitAfter, the stack of its timer's goroutine, where the panic ends
// the program: see [Executor]). If the executor runs tasks on the caller
// ([CallerRuns]), the submitter whose task started the loop runs it,
// including tasks other goroutines submit meanwhile. If it waits for room
// ([Block]), so does the submitter whose task finds the Serial idle (or,
// for a delayed task, its timer): a task of that pool that submits to an
// idle Serial holds its worker while it waits, and once every worker does,
// nothing runs again. Give such a pool a queue (PoolQueue) with room for
// the Serials its tasks submit to, or submit from outside its tasks.
// Close and Shutdown never submit to the executor themselves, so they
// take no panic from it (a Submit whose executor panics while Shutdown
// waits takes that panic; its task runs, and Shutdown returns nil once it
// has), and wait for room in it only as Shutdown waits for the accepted
// tasks to run: on the loop that a Submit or a timer handed to the
// executor, which may still wait there for room (until ctx ends). Close
// does not wait for the executor to start a loop; see [Serial.Close].
//
// A task that panics does not stop the loop: see [SerialPanicHandler].
//
// A task submitted with [Serial.SubmitAfter] can be cancelled until it
// starts, queued or not; a d of 0 queues it at once.
//
// [Serial.Close] drops the tasks still queued rather than running them;
// [Serial.Shutdown] refuses new tasks and runs the accepted ones first.
//
// A Serial is safe for concurrent use. It must be created with
// [NewSerial] and must not be copied after first use. The zero Serial,
// and a nil *Serial, refuse tasks: Submit, SubmitAfter and Shutdown
// return an error saying so (Close does nothing, Stats is zero).
type Serial struct {
	// Read by everyone, written once.
	exec    Executor
	onPanic func(*PanicError)
	drainFn func()      // s.drain, allocated once
	closed  atomic.Bool // Close: queued tasks are dropped
	refuse  atomic.Bool // Close or Shutdown: no task is accepted
	shut    atomic.Bool // a Shutdown has run every accepted task
	// held is set by the drain loop that owns the queue and cleared,
	// under mu, with running; a loop that finds it set returns (see
	// schedule).
	held atomic.Bool

	// Written by every Submit; on its own cache line so that the drain
	// loop's per-task read of closed does not miss.
	_       [64]byte
	mu      sync.Mutex   // guards queue, marks and running
	queue   []serialItem // submitted, not yet taken by the drain loop
	marks   int          // markers in queue, which Stats does not count
	running bool         // a drain loop is scheduled or running
	_       [64]byte

	// Owned by the drain loop, which runs on one goroutine at a time: its
	// spent buffer, and where to resume if a task ended its goroutine.
	pending []serialItem
	next    int

	completed atomic.Uint64
	dropped   atomic.Uint64
	panicked  atomic.Uint64
	cancelled atomic.Uint64

	dmu       sync.Mutex     // guards delayed and seq
	delayed   delayHeap      // tasks waiting for their timers
	seq       uint64         // SubmitAfter calls so far
	timers    sync.WaitGroup // timer callbacks that have not finished
	closeOnce sync.Once
}

// serialItem is a task: fn, or t's if t is not nil (a task of
// SubmitAfter, which may be cancelled while queued); or, if t.mark is not
// nil, a marker of Close or Shutdown, closed when the drain loop reaches
// it. Two words, as a plain Submit's item was before tasks could be
// cancelled: the queue's buffers are copied and cleared per task.
type serialItem struct {
	fn func()
	t  *delayedTask
}

// errZeroSerial is the error of a zero Serial's methods, and a nil
// *Serial's: it has no executor to run its drain loop on.
var errZeroSerial = errors.New("asynctool: Serial not made with NewSerial")

// NewSerial returns a Serial that runs its drain loop on exec. A nil exec
// (or a nil func or pointer in it: a nil ExecutorFunc, *Pool or *Serial,
// say) means [GoExecutor].
func NewSerial(exec Executor, opts ...SerialOption) *Serial {
	var c serialConfig
	for _, o := range opts {
		if o != nil {
			o.applySerial(&c)
		}
	}
	if isNil(exec) {
		exec = GoExecutor{}
	}
	s := &Serial{exec: exec, onPanic: c.onPanic}
	s.drainFn = s.drain
	return s
}

// Submit queues task to run after every task submitted before it. It
// returns [ErrSerialClosed] once Close or Shutdown has begun, [ErrNilTask]
// for a nil task, and otherwise nil: the task then runs exactly once,
// unless Close (or a Shutdown whose ctx ends) drops it first. Submit may
// be called from inside a task; the new task runs after the current one
// returns.
func (s *Serial) Submit(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	if s == nil || s.drainFn == nil {
		return errZeroSerial
	}
	return s.push(serialItem{fn: task})
}

// SubmitAfter queues task once d has passed; it then runs in order with
// the tasks submitted by then. Delayed tasks are queued in the order of
// their due times, and tasks due at the same time (the same d from one
// goroutine, or equal due times) in the order SubmitAfter was called. No
// goroutine waits meanwhile (the delay is a runtime timer). A d <= 0
// queues task at once.
//
// cancel stops the task if it has not started: while it waits for its
// delay, or once queued, until the drain loop takes it. It reports
// whether it stopped the task; the task then never runs, and is counted
// in [SerialStats.Cancelled]. A task cancelled while queued keeps its
// place, as a tombstone the drain loop skips, so cancel costs O(log n)
// in the delayed tasks and O(1) in the queue. cancel is safe to call
// more than once and from any goroutine, and reports false once the
// task has started, has been cancelled, or has been dropped by Close.
//
// SubmitAfter returns the same errors as [Serial.Submit], with a nil
// cancel.
func (s *Serial) SubmitAfter(d time.Duration, task func()) (cancel func() bool, err error) {
	if task == nil {
		return nil, ErrNilTask
	}
	if s == nil || s.drainFn == nil {
		return nil, errZeroSerial
	}
	if d <= 0 {
		if s.refuse.Load() {
			return nil, ErrSerialClosed
		}
		t := &delayedTask{s: s, fn: task, idx: -1}
		if err := s.push(serialItem{t: t}); err != nil {
			return nil, err
		}
		return t.cancel, nil
	}
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if s.refuse.Load() {
		return nil, ErrSerialClosed
	}
	s.seq++
	t := &delayedTask{s: s, fn: task, when: time.Now().Add(d), seq: s.seq}
	heap.Push(&s.delayed, t)
	s.timers.Add(1)
	t.timer = time.AfterFunc(d, t.fire)
	return t.cancel, nil
}

// delayedTask is a task of SubmitAfter. It is in s.delayed until it is
// queued, is cancelled or is dropped by Close, whichever comes first;
// once queued, its state decides between the drain loop taking it and
// cancel stopping it.
type delayedTask struct {
	s     *Serial
	fn    func() // nil once cancelled
	timer *time.Timer
	when  time.Time // due time
	seq   uint64    // SubmitAfter's order, for tasks due at the same time
	idx   int       // position in s.delayed, -1 once out of it
	state atomic.Int32
	mark  chan struct{} // not nil for a marker (see serialItem)
}

// A delayedTask's state: it is waiting (in s.delayed or queued), taken
// (by the drain loop, to run or to drop, or dropped by Close from
// s.delayed), or cancelled.
const (
	taskWaiting int32 = iota
	taskTaken
	taskCancelled
)

// before orders delayed tasks by due time, then by submission.
func (t *delayedTask) before(u *delayedTask) bool {
	if c := t.when.Compare(u.when); c != 0 {
		return c < 0
	}
	return t.seq < u.seq
}

// fire queues t and every delayed task due no later than t, in their
// order. Timers due together call fire on goroutines of their own, in no
// particular order: a fire queues the tasks due before its own (which
// their fires then find gone), so that they keep their order. The tasks
// are appended under dmu, which orders one fire's batch against the
// next, and the drain loop is started after dmu is released, since an
// executor may run it right here (CallerRuns) and a task may call
// SubmitAfter. The fire counts as done (for Close and Shutdown, which
// wait for the timers) once its tasks are queued: starting the loop may
// wait for room in the executor (Block), and Close need not wait for
// that, since it drops a queue whose loop has not started itself.
func (t *delayedTask) fire() {
	s := t.s
	s.dmu.Lock()
	if t.idx < 0 {
		s.dmu.Unlock()
		s.timers.Done()
		return // queued by an earlier fire, cancelled or dropped
	}
	s.mu.Lock()
	for len(s.delayed) > 0 && !t.before(s.delayed[0]) {
		u := heap.Pop(&s.delayed).(*delayedTask)
		if u != t && u.timer.Stop() {
			s.timers.Done() // u's fire will not run
		}
		s.queue = append(s.queue, serialItem{t: u})
	}
	start := !s.running
	s.running = true
	s.mu.Unlock()
	s.dmu.Unlock()
	s.timers.Done()
	if start {
		s.schedule()
	}
}

// cancel is the function SubmitAfter returns.
func (t *delayedTask) cancel() bool {
	s := t.s
	s.dmu.Lock()
	if t.idx >= 0 {
		heap.Remove(&s.delayed, t.idx)
		if t.timer.Stop() {
			s.timers.Done() // fire will not run
		}
		t.state.Store(taskCancelled)
		t.fn = nil
		s.dmu.Unlock()
		s.cancelled.Add(1)
		return true
	}
	s.dmu.Unlock()
	// Queued, or already taken or cancelled. The drain loop reads fn only
	// after taking the task, so only one of the two touches it.
	if !t.state.CompareAndSwap(taskWaiting, taskCancelled) {
		return false
	}
	t.fn = nil
	s.cancelled.Add(1)
	return true
}

// delayHeap is a min-heap (container/heap) of delayed tasks by
// delayedTask.before, each knowing its index, so that cancel removes it
// in O(log n).
type delayHeap []*delayedTask

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *delayHeap) Push(x any) {
	t := x.(*delayedTask)
	t.idx = len(*h)
	*h = append(*h, t)
}

func (h *delayHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.idx = -1
	return t
}

// push queues a task and starts the drain loop if none is running. The
// task is refused once refuse is set: looked at under mu, so that every
// task accepted is ahead of a marker that Close or Shutdown queues after
// setting refuse.
func (s *Serial) push(it serialItem) error {
	s.mu.Lock()
	if s.refuse.Load() {
		s.mu.Unlock()
		return ErrSerialClosed
	}
	s.queue = append(s.queue, it)
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		s.schedule()
	}
	return nil
}

// mark queues a marker and returns the channel the drain loop closes when
// it reaches it, once every item queued before it has been taken. A
// marker is never refused. On an idle Serial nothing is queued or
// running, so the channel is closed at once: the executor is not asked
// for a loop with nothing to do, so that Shutdown keeps to its ctx with
// an executor that waits for room (a full Pool under Block), and Close
// and Shutdown do not take the panic of an executor whose Submit panics.
func (s *Serial) mark() <-chan struct{} {
	m := &delayedTask{mark: make(chan struct{})}
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		close(m.mark)
		return m.mark
	}
	s.queue = append(s.queue, serialItem{t: m})
	s.marks++
	s.mu.Unlock()
	return m.mark
}

// schedule starts the drain loop. After Close the loop only drops tasks,
// which is quick, so it runs on the calling goroutine.
//
// If exec's Submit panics, the panic goes on up, but the loop is started
// on a goroutine first, as when exec refuses it: running is set, so no
// later push would start one, and the queue would never drain. An
// executor that kept the loop before it panicked may run it as well;
// held makes that second loop return at once.
func (s *Serial) schedule() {
	if s.closed.Load() {
		s.drain()
		return
	}
	submitted := false
	defer func() {
		if !submitted {
			go s.drain()
		}
	}()
	if s.exec.Submit(s.drainFn) != nil {
		go s.drain()
	}
	submitted = true
}

// drain runs queued tasks until the queue is empty. Only one loop runs at
// a time: a loop is started only by the push that sets running (or by
// Close, to drop the queue before the executor starts the loop), and
// running is cleared, under mu, only by the loop that holds the queue
// once it is empty; held makes any other loop return at once (one an
// executor ran after its Submit panicked, or one that Close has beaten).
// The loop swaps the queue with its own spent buffer, so neither side
// allocates once the buffers have grown.
func (s *Serial) drain() {
	if !s.held.CompareAndSwap(false, true) {
		// Another loop holds the queue and takes what is in it before
		// it clears running: this one is a second run of a loop whose
		// Submit panicked (see schedule).
		return
	}
	// The loop works on locals: the batch position is saved only if a
	// task ends the goroutine, which keeps per-task writes off the fields
	// submitters share. The counters are published per task, so that
	// Stats is current while a task runs (one uncontended atomic add,
	// on a cache line submitters do not write).
	pending, next := s.pending, s.next
	normal := false
	defer func() {
		if !normal {
			// A task called runtime.Goexit; it counts as completed.
			// Carry on from the next item in a new loop; running is
			// still set. The loop is asked for on a goroutine of its
			// own: this one may hold the executor's only room (a Pool's
			// worker under Block), which it gives up once it has exited.
			s.completed.Add(1)
			s.pending, s.next = pending, next
			s.held.Store(false)
			go s.schedule()
		}
	}()
	for {
		if next == len(pending) {
			s.mu.Lock()
			if len(s.queue) == 0 {
				s.running = false
				s.pending, s.next = pending[:0], 0
				s.held.Store(false)
				s.mu.Unlock()
				normal = true
				return
			}
			pending, s.queue, next = s.queue, pending[:0], 0
			s.marks = 0
			s.mu.Unlock()
		}
		it := pending[next]
		pending[next] = serialItem{}
		next++
		if t := it.t; t != nil {
			if t.mark != nil {
				close(t.mark)
				continue
			}
			if !t.state.CompareAndSwap(taskWaiting, taskTaken) {
				continue // cancelled while queued: a tombstone
			}
			it.fn = t.fn
		}
		if s.closed.Load() {
			s.dropped.Add(1)
			continue
		}
		if runTask(it.fn, s.onPanic) {
			s.panicked.Add(1)
		}
		s.completed.Add(1)
	}
}

// Close stops the Serial: Submit and SubmitAfter return [ErrSerialClosed]
// from then on, delayed tasks are cancelled, and tasks still queued are
// dropped, not run (both are counted in [SerialStats.Dropped]). Close
// waits for the task that is running, if any, to return, but not for the
// executor to start a drain loop (one waiting in a [Pool]'s queue, or a
// Submit or a delayed task's timer waiting for room under [Block]): with
// no task running, Close drops the queued tasks itself. So the
// executor's Submit may still be called after Close has returned, by a
// Submit or a delayed task's timer that raced Close, or by the goroutine
// that carries on after a task called runtime.Goexit, with a drain loop
// that finds nothing to run: an executor closed after the Serial must
// still return from that Submit (with an error, as a closed [Pool] does). A
// Submit that races Close may still return nil; its task has then run or
// been dropped and counted when Close returns. Close is idempotent. It must
// not be called from inside one of the Serial's tasks, which would wait
// for itself. A Serial satisfies [Executor], but dropping queued tasks breaks
// that interface's run-exactly-once contract: a Serial passed as an
// Executor (to an Async, a Stream or RunBatches) must be closed only once
// they are done with it, or the tasks it drops are theirs, which then
// never run; [Serial.Shutdown] keeps the contract unless its ctx ends.
func (s *Serial) Close() {
	if s == nil {
		return
	}
	s.closeOnce.Do(func() {
		s.dmu.Lock()
		s.refuse.Store(true)
		s.closed.Store(true)
		for _, t := range s.delayed {
			t.idx = -1
			t.state.Store(taskTaken) // dropped: cancel reports false
			if t.timer.Stop() {
				s.timers.Done()
			}
			s.dropped.Add(1)
		}
		s.delayed = nil
		s.dmu.Unlock()
		s.timers.Wait() // timer callbacks that were already running
		m := s.mark()
		// A loop that does not hold the queue yet (the executor has queued
		// it, or waits for room) is running no task: the queue is dropped
		// here rather than when the executor gets to the loop, which then
		// finds nothing. A loop that holds the queue is running a task,
		// which Close waits for.
		s.drain()
		<-m
	})
}

// Shutdown stops the Serial gracefully. Submit and SubmitAfter return
// [ErrSerialClosed] from then on, including from inside its tasks, while
// the tasks already accepted still run in order: those queued, and the
// delayed ones when their delay passes (their cancel still works).
// Shutdown returns nil once they have all run or been cancelled; the
// Serial then refuses tasks as a closed one does (a later Close has
// nothing left to drop).
//
// If ctx is done first (a ctx already done when Shutdown is called counts,
// even with nothing left to run), Shutdown closes the Serial as
// [Serial.Close] does, dropping the tasks that have not started, and
// returns ctx's error once the task that is running, if any, has returned:
// ctx does not bound that wait. If Close is called meanwhile, or was before,
// Shutdown returns [ErrSerialClosed] once Close has returned; so does a
// Shutdown that begins after another has finished (seen every accepted
// task run, which may be a moment before that one returns), while
// Shutdowns called together all wait and return nil. A Submit that races
// Shutdown may still return nil; its task then runs before Shutdown
// returns nil. Shutdown must not be called from inside one of the
// Serial's tasks, which would wait for itself.
func (s *Serial) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if s == nil || s.drainFn == nil {
		return errZeroSerial
	}
	s.dmu.Lock()
	s.refuse.Store(true) // under dmu: no delayed task is added after this
	s.dmu.Unlock()
	again := s.shut.Load()
	// The delayed tasks are queued by their timers (or cancelled, or
	// dropped by a Close), after which a marker behind them in the queue
	// is reached once they have run.
	// On ctx's end, Close stops the timers, so Wait returns.
	if err := waitOrStop(ctx, &s.timers, s.Close); err != nil {
		return err
	}
	select {
	case <-s.mark():
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
	// closed is Close's alone: a Shutdown that finished first leaves it
	// unset, so that the Shutdowns called with it report nil too.
	if s.closed.Load() || again {
		s.Close() // returns once a Close under way has
		return ErrSerialClosed
	}
	s.shut.Store(true)
	return nil
}

// waitOrStop waits for wg, or, if ctx ends first, calls stop, which must
// make wg's Wait return, waits for wg all the same (so that the goroutine
// that waits is gone), and returns ctx's error. A ctx already done counts
// as ending first, even if wg has nothing to wait for, so that the result
// does not depend on which of the two a select sees first.
func waitOrStop(ctx context.Context, wg *sync.WaitGroup, stop func()) error {
	if err := ctx.Err(); err != nil {
		stop()
		wg.Wait()
		return err
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		<-done
		return ctx.Err()
	}
}

// Stats returns a snapshot of the Serial's counters.
func (s *Serial) Stats() SerialStats {
	if s == nil {
		return SerialStats{}
	}
	s.dmu.Lock()
	delayed := len(s.delayed)
	s.dmu.Unlock()
	s.mu.Lock()
	queued := len(s.queue) - s.marks
	s.mu.Unlock()
	return SerialStats{
		Queued:    queued,
		Delayed:   delayed,
		Completed: s.completed.Load(),
		Dropped:   s.dropped.Load(),
		Panicked:  s.panicked.Load(),
		Cancelled: s.cancelled.Load(),
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
