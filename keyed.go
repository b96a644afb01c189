package asynctool

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// keyedShards is the number of independently locked parts of a Keyed's
// key table; submitters for different keys rarely contend.
const keyedShards = 32

// keyedFreeQueues bounds how many drained per-key queues a shard keeps
// for reuse.
const keyedFreeQueues = 16

// keyedMapKeep is the most keys a shard's map may have held for the map
// to be kept once the shard has no key left: a Go map never gives back
// the room it grew to, so a larger one is dropped then, and made again
// for the next key.
const keyedMapKeep = 64

// Keyed runs tasks in order per key: the tasks submitted for one key run
// one at a time in submission order, as on a [Serial], while tasks for
// different keys run in parallel on a shared [Executor]. A typical key is
// a user or account id, whose events must be applied in order. The order
// is that of the Submit calls: submit a key's events from the goroutine
// that receives them (or from a Serial's tasks), not from tasks of a pool
// that decode them in parallel, which reorders them before Submit.
//
// A key has a queue only while it has tasks: the queue is created by the
// first Submit for the key and removed when its last task has run, so the
// table does not grow with the number of keys ever seen, and no goroutine
// is held for a key, or at all, while there is nothing to do. Each key
// with pending tasks has one drain loop on the executor, which runs the
// key's tasks until none is left before it gives its goroutine back: a key
// fed as fast as its tasks run (a task that submits the key's next one,
// say) keeps that goroutine for as long, and while as many such keys as the
// executor has goroutines (a Pool's PoolSize) keep theirs, the loops of
// the other keys wait in its queue. Serials that share an executor do the
// same. Size the pool for the keys that may be busy at once. The table
// is split in 32 shards by the key's hash; a shard keeps the room for the
// most keys it has had pending at once until it has none pending, and then
// gives that room back if it had held more than 64. Up to 16
// drained queues per shard (512 in all) are kept for reuse, each with
// buffers as long as the longest queue it had (their slots cleared, so
// no task is kept alive): a burst for one key holds that memory while
// its queue is kept.
//
// If the executor refuses a key's drain loop (a closed or full [Pool]
// under [Reject]), the loop runs on a new goroutine instead, so that no
// task is lost; so it does if the executor's Submit panics, and the panic
// then goes on up the stack of the Submit that started the loop. If it
// runs tasks on the caller ([CallerRuns], a [Pool]'s default), a Submit
// that finds the pool full runs the key's drain loop itself, and returns
// only once the key has no task left, those other goroutines submit for
// it meanwhile included (as on a Serial); so the pool's size does not
// bound how many keys run at once either: use a Pool under [Block] for
// that bound. Under Block, though, a task that submits for a key with
// no queue waits, like any submitter, for a worker while it holds one:
// once every worker does, nothing runs again. Give such a pool a queue
// (PoolQueue) with room for the keys that tasks submit to, or submit them
// from outside the tasks. Keyed has no SubmitAfter: for a delayed task per
// key, call Submit from a time.AfterFunc (ExampleKeyed_delayed), or use a
// [Serial] per key. Keyed knows nothing of such timers: [Keyed.Shutdown]
// does not wait for them, and one that fires once Shutdown has begun gets
// ErrSerialClosed, so its task never runs. Wait for the timers (or stop
// them) before Shutdown, as Serial.Shutdown does for its delayed tasks.
// Stopping the timer is the task's cancel until it fires; once it has,
// the task is queued and nothing stops it.
// Panics are handled as on a [Serial]; see [SerialPanicHandler]. As on a
// Serial, [Keyed.Close] drops the tasks still queued, and [Keyed.Shutdown]
// runs them first.
//
// A key must be equal to itself: a key that holds a floating-point NaN
// (a NaN float or complex key, or a struct, array or interface key with a
// NaN in it) never finds its own queue, so [Keyed.Submit] refuses it with
// [ErrNaNKey]. A key that holds a slice, map or func in an interface
// cannot be hashed at all; Submit refuses it with [ErrUnhashableKey].
//
// A Keyed is safe for concurrent use. It must be created with [NewKeyed]
// and must not be copied after first use. The zero Keyed, and a nil
// *Keyed, refuse tasks: Submit returns an error saying so (a nil one's
// Close and Shutdown do nothing, its Stats are zero).
type Keyed[K comparable] struct {
	exec    Executor
	onPanic func(*PanicError)
	seed    maphash.Seed
	closed  atomic.Bool    // Close: queued tasks are dropped
	refuse  atomic.Bool    // Close or Shutdown: no task is accepted
	shut    atomic.Bool    // a Shutdown has run every accepted task
	active  sync.WaitGroup // one per key with a queue
	keys    atomic.Int64

	completed atomic.Uint64
	dropped   atomic.Uint64
	panicked  atomic.Uint64

	shards [keyedShards]keyedShard[K]
}

type keyedShard[K comparable] struct {
	mu     sync.Mutex
	queues map[K]*keyQueue[K]
	peak   int // the most keys queues has held since it was made
	free   []*keyQueue[K]
	_      [64]byte // keep shards' locks on separate cache lines
}

// keyQueue is the queue of one key. tasks is guarded by the shard's mu;
// pending and next belong to the key's drain loop.
type keyQueue[K comparable] struct {
	key     K
	shard   *keyedShard[K]
	tasks   []func()
	pending []func()
	next    int
	drain   func() // the drain loop for this queue, allocated once
	// held is set by the drain loop that owns the queue; a loop that
	// finds it set returns. It is cleared, under the shard's mu, when the
	// queue is removed, unless dead: the queue's loop was submitted by a
	// Submit that panicked, or Close drained the queue before the
	// executor started its loop, and the executor may still run that
	// loop, so the queue is never reused and stays held (see schedule and
	// Close).
	held atomic.Bool
	dead bool // guarded by the shard's mu
}

// errZeroKeyed is the error of a zero Keyed's Submit, and a nil *Keyed's:
// it has no executor, and no tables for its keys' queues.
var errZeroKeyed = errors.New("asynctool: Keyed not made with NewKeyed")

// NewKeyed returns a Keyed that runs its per-key drain loops on exec. A
// nil exec (or a nil func or pointer in it: a nil ExecutorFunc, *Pool or
// *Serial, say) means [GoExecutor].
func NewKeyed[K comparable](exec Executor, opts ...SerialOption) *Keyed[K] {
	var c serialConfig
	for _, o := range opts {
		if o != nil {
			o.applySerial(&c)
		}
	}
	if isNil(exec) {
		exec = GoExecutor{}
	}
	return &Keyed[K]{exec: exec, onPanic: c.onPanic, seed: maphash.MakeSeed()}
}

// Submit queues task to run after every task submitted before it for the
// same key. It returns [ErrSerialClosed] once Close or Shutdown has begun,
// [ErrNilTask] for a nil task, [ErrNaNKey] for a key that is not equal to
// itself (it holds a NaN), [ErrUnhashableKey] for a key that holds a
// slice, map or func, and otherwise nil: the task then runs exactly once,
// unless Close (or a Shutdown whose ctx ends) drops it first. Submit may
// be called from inside a task, for any key; a task for the same key runs
// after the current one returns.
func (k *Keyed[K]) Submit(key K, task func()) error {
	if task == nil {
		return ErrNilTask
	}
	if k == nil || k.exec == nil {
		return errZeroKeyed
	}
	h, ok := hashKey(k.seed, key)
	if !ok {
		return ErrUnhashableKey
	}
	sh := &k.shards[h%keyedShards]
	sh.mu.Lock()
	if k.refuse.Load() {
		sh.mu.Unlock()
		return ErrSerialClosed
	}
	q := sh.queues[key]
	start := q == nil
	if start {
		// Only a key that finds no queue can be one that never would:
		// checked here, the common Submit pays nothing for it.
		if key != key {
			sh.mu.Unlock()
			return ErrNaNKey
		}
		q = k.newQueue(sh, key)
		k.active.Add(1)
		k.keys.Add(1)
	}
	q.tasks = append(q.tasks, task)
	sh.mu.Unlock()
	if start {
		k.schedule(q, key)
	}
	return nil
}

// hashKey hashes key, reporting false if key holds a value Go cannot
// hash (a slice, map or func in an interface), on which
// maphash.Comparable panics, as a map does.
func hashKey[K comparable](seed maphash.Seed, key K) (h uint64, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return maphash.Comparable(seed, key), true
}

// newQueue returns an empty queue for key, registered in sh. Called with
// sh.mu held.
func (k *Keyed[K]) newQueue(sh *keyedShard[K], key K) *keyQueue[K] {
	var q *keyQueue[K]
	if n := len(sh.free); n > 0 {
		q = sh.free[n-1]
		sh.free[n-1] = nil
		sh.free = sh.free[:n-1]
	} else {
		q = &keyQueue[K]{shard: sh}
		q.drain = func() { k.drainQueue(q) }
	}
	q.key = key
	if sh.queues == nil {
		sh.queues = make(map[K]*keyQueue[K])
	}
	sh.queues[key] = q
	sh.peak = max(sh.peak, len(sh.queues))
	return q
}

// schedule starts q's drain loop; key is q's key, which q's loop may
// already have cleared.
//
// If exec's Submit panics, the panic goes on up, but q's tasks must still
// run: the loop is started on a goroutine, as when exec refuses it,
// unless a loop holds q or has removed it already (an executor that kept
// the loop before it panicked may have run it). q is then dead: it stays
// held once its tasks have run, so that the loop the executor may have
// kept returns at once whenever it runs, rather than drain q again after
// it was reused for another key.
func (k *Keyed[K]) schedule(q *keyQueue[K], key K) {
	submitted := false
	defer func() {
		if submitted {
			return
		}
		sh := q.shard
		sh.mu.Lock()
		ours := sh.queues[key] == q && q.held.CompareAndSwap(false, true)
		if ours {
			q.dead = true
		}
		sh.mu.Unlock()
		if ours {
			go k.drainHeld(q)
		}
	}()
	if k.exec.Submit(q.drain) != nil {
		go q.drain()
	}
	submitted = true
}

// drainQueue runs q's tasks until it is empty, then removes q from the
// table. A key has at most one drain loop: the loop is started by the
// Submit that creates the queue and the queue is removed, under the
// shard's lock, only by the loop once no task is left (held guards
// against a loop an executor ran after its Submit panicked).
func (k *Keyed[K]) drainQueue(q *keyQueue[K]) {
	if q.held.CompareAndSwap(false, true) {
		k.drainHeld(q)
	}
}

// drainHeld is drainQueue once the loop holds q.
func (k *Keyed[K]) drainHeld(q *keyQueue[K]) {
	sh := q.shard
	normal := false
	defer func() {
		if !normal {
			// A task called runtime.Goexit; it counts as completed.
			// Carry on from the next task in a new loop.
			k.completed.Add(1)
			key := q.key
			q.held.Store(false)
			// After Close the loop only drops tasks: it does so here,
			// rather than on the executor, which Close would wait for
			// (a Close that found q held waits for its loop to end).
			// closed is read after held is released, so either Close
			// takes q or this sees closed.
			if k.closed.Load() {
				if q.held.CompareAndSwap(false, true) {
					k.drainHeld(q)
				}
				return
			}
			// The loop is asked for on a goroutine of its own: this
			// one may hold the executor's only room (a Pool's worker
			// under Block), which it gives up once it has exited.
			go k.schedule(q, key)
		}
	}()
	for {
		if q.next == len(q.pending) {
			sh.mu.Lock()
			if len(q.tasks) == 0 {
				delete(sh.queues, q.key)
				if len(sh.queues) == 0 && sh.peak > keyedMapKeep {
					sh.queues, sh.peak = nil, 0
				}
				if !q.dead {
					var zero K
					q.key = zero
					q.pending, q.next = q.pending[:0], 0
					q.held.Store(false)
					if len(sh.free) < keyedFreeQueues {
						sh.free = append(sh.free, q)
					}
				}
				sh.mu.Unlock()
				k.keys.Add(-1)
				normal = true
				k.active.Done()
				return
			}
			q.pending, q.tasks, q.next = q.tasks, q.pending[:0], 0
			sh.mu.Unlock()
		}
		task := q.pending[q.next]
		q.pending[q.next] = nil
		q.next++
		if k.closed.Load() {
			k.dropped.Add(1)
			continue
		}
		if runTask(task, k.onPanic) {
			k.panicked.Add(1)
		}
		k.completed.Add(1)
	}
}

// Close stops the Keyed: Submit returns [ErrSerialClosed] from then on,
// and tasks still queued are dropped, not run (counted in
// [SerialStats.Dropped]). Close waits for the running tasks, at most one
// per key, to return and for their drain loops to end, but not for the
// executor to start a key's drain loop (one waiting in a [Pool]'s queue,
// say): Close drops that key's tasks itself, and the loop, when the
// executor runs it, finds nothing. So the executor's Submit may still be
// called after Close has returned, by a Submit that raced Close or by the
// goroutine that carries on after a task called runtime.Goexit, with a
// loop that finds nothing: an executor closed after the Keyed must still
// return from that Submit (with an error, as a closed [Pool] does). Close
// is idempotent. It must not be called from inside one of the Keyed's
// tasks, which would wait for itself.
func (k *Keyed[K]) Close() {
	if k == nil {
		return
	}
	k.closed.Store(true)
	k.stopIntake()
	// Take every queue whose loop has not started (a loop that holds its
	// queue is running a task, which Close waits for) and drop its tasks
	// here. Such a queue is dead: its loop is still with the executor, so
	// it stays held (see drainHeld), and that loop returns at once.
	var idle []*keyQueue[K]
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for _, q := range sh.queues {
			if q.held.CompareAndSwap(false, true) {
				q.dead = true
				idle = append(idle, q)
			}
		}
		sh.mu.Unlock()
	}
	for _, q := range idle {
		k.drainHeld(q)
	}
	k.active.Wait()
}

// stopIntake makes Submit refuse tasks. Once each shard's lock has been
// taken after refuse was set, every Submit that could still add a task
// has seen it, so no key is registered from then on.
func (k *Keyed[K]) stopIntake() {
	k.refuse.Store(true)
	for i := range k.shards {
		k.shards[i].mu.Lock()
		k.shards[i].mu.Unlock()
	}
}

// Shutdown stops the Keyed gracefully. Submit returns [ErrSerialClosed]
// from then on, including from inside its tasks, while the tasks already
// accepted still run, in order per key. Shutdown returns nil once they
// have all run; the Keyed is then closed.
//
// If ctx is done first (a ctx already done when Shutdown is called counts,
// even with nothing left to run), Shutdown closes the Keyed as
// [Keyed.Close] does, dropping the tasks that have not started, and
// returns ctx's error once the running tasks have returned. If Close is
// called meanwhile, or was before, Shutdown returns [ErrSerialClosed] once
// every key's tasks have run or been dropped (a drain loop that the
// executor has not started then finds nothing when it runs; see Close);
// so does a Shutdown that begins after another has finished (seen every
// accepted task run, which may be a moment before that one returns),
// while Shutdowns called together all wait and return nil.
// Shutdown must not be called from inside one of the Keyed's tasks, which
// would wait for itself.
func (k *Keyed[K]) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if k == nil {
		return nil
	}
	k.stopIntake()
	again := k.shut.Load()
	// On ctx's end, Close's drain loops drop what is left, so Wait returns.
	if err := waitOrStop(ctx, &k.active, k.Close); err != nil {
		return err
	}
	// closed is Close's alone: a Shutdown that finished first leaves it
	// unset, so that the others report nil too.
	if k.closed.Load() || again {
		return ErrSerialClosed
	}
	k.shut.Store(true)
	return nil
}

// Stats returns a snapshot of the Keyed's counters.
func (k *Keyed[K]) Stats() SerialStats {
	if k == nil {
		return SerialStats{}
	}
	return SerialStats{
		Keys:      int(k.keys.Load()),
		Completed: k.completed.Load(),
		Dropped:   k.dropped.Load(),
		Panicked:  k.panicked.Load(),
	}
}
