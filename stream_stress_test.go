package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentStreamsKeepTheirContract runs many streams at once, each
// with a random plan: producers that append before Run, while it runs,
// after the nodes they appended ended (the stream idle) and after Run
// ended, and nodes that append others as they run; nodes that succeed,
// fail once or always, panic, call runtime.Goexit, sleep, wait for Run's
// context or pass their AttemptTimeout; every failure policy, with or
// without a StreamRetry (whose Retryable may panic); Append as well as
// AppendWith; Resume (Rerun, SucceedWith, FailWith, two at once) on
// suspended nodes; a cancel or a short deadline of Run's context; Close
// before Run, while it runs or after the producers, at times twice at
// once; Run called twice at once. Then it checks each stream against the
// Stream docs: every node ends, once; nodes run one at a time, each after
// its predecessor ended, in the order their appends took effect; each call
// gets the value of the last node that succeeded before it (the initial
// value if none); each node ends as its calls, its policy, its retries and
// its resumptions say; Attempts counts the calls; a node that did not run
// ends with the error of the stream's end; Run and Close return what ended
// the stream; Close returns only after the nodes appended before it ended;
// appends after the end end at once. ASYNCTOOL_STREAM_STRESS_RUNS sets the
// streams per goroutine (50); ASYNCTOOL_STREAM_STRESS_SEED the first
// stream's seed (random), so that a failure's seed runs its plan first.
func TestConcurrentStreamsKeepTheirContract(t *testing.T) {
	runs, goroutines := stressRuns(t, "ASYNCTOOL_STREAM_STRESS_RUNS", 50), 8
	base := rand.Uint64()
	if s := os.Getenv("ASYNCTOOL_STREAM_STRESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ASYNCTOOL_STREAM_STRESS_SEED=%q: want a number", s)
		}
		base = n
	}
	var next atomic.Uint64
	var hung atomic.Bool // a stream hung: start no more
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range runs {
				if hung.Load() {
					return
				}
				seed := base + next.Add(1) - 1
				st := newStreamStress(seed)
				st.run()
				if st.hung {
					hung.Store(true)
				}
				if len(st.problems) > 0 {
					t.Errorf("stream of seed %d (ASYNCTOOL_STREAM_STRESS_SEED=%d runs its plan first): %s\nplan: %s",
						seed, seed, strings.Join(st.problems, "\n"), st.plan())
				}
			}
		})
	}
	wg.Wait()
}

// streamStressStep is what one call of a stress stream node does.
type streamStressStep uint8

const (
	streamStressOK       streamStressStep = iota // returns prev + "/" + its id
	streamStressFail                             // fails, with prev + "/" + its id + "!"
	streamStressPanic                            // panics
	streamStressGoexit                           // calls runtime.Goexit
	streamStressSleep                            // sleeps, then succeeds as streamStressOK
	streamStressCtx                              // waits for Run's context (a while at most): fails if it ended, else succeeds
	streamStressOvertime                         // waits for its attempt's context, which its AttemptTimeout ends, then succeeds
	streamStressSpawn                            // appends its children (on its first call), then succeeds
)

var streamStressStepNames = [...]string{"ok", "fail", "panic", "goexit", "sleep", "ctx", "overtime", "spawn"}

// streamStressErr is the failure of one call of a stress node (its
// panic's value, for a panic), or a stream's context's cause (call -1).
type streamStressErr struct {
	node string
	call int
	ctx  error // the call's ctx.Err(), for a streamStressCtx call that saw it end
}

func (e *streamStressErr) Error() string {
	return fmt.Sprintf("call %d of %s failed (ctx: %v)", e.call, e.node, e.ctx)
}

func (e *streamStressErr) Unwrap() error { return e.ctx }

const (
	streamStressRerun = iota
	streamStressSucceed
	streamStressFailWith
)

// streamStressResume is a resumption Resume accepted for a node.
type streamStressResume struct {
	kind int
	val  string // SucceedWith's
	err  error  // FailWith's
	at   int    // the node's Attempts as it was resumed
}

// streamStressCall is one call of a node's function.
type streamStressCall struct {
	input       string
	step        streamStressStep
	val         string
	err         error // its failure (an overtime call's *AttemptTimeoutError), nil if it succeeded, panicked or called Goexit
	panicked    error // its panic's value
	enter, exit int64 // the stream's clock as it began and returned
	ctxEnded    bool  // Run's context had ended as it returned
}

// failure is the call's error, or its panic's value; nil if it succeeded
// (or called Goexit).
func (c *streamStressCall) failure() error {
	if c.panicked != nil {
		return c.panicked
	}
	return c.err
}

// streamStressNode is one node of a stress stream: its plan, then what
// happened to it.
type streamStressNode struct {
	id      string
	policy  FailurePolicy
	retry   *RetryPolicy
	script  []streamStressStep // call k does script[k], the last one after the end
	sleep   time.Duration      // of a streamStressSleep or streamStressCtx call
	refused error              // the error AppendWith must end the node with at once
	mode    int                // how its producer appends it: 0 at once, 1 after delay, 2 after its previous node ended
	delay   time.Duration
	append  bool // appended with Append (PolicyFail)
	// children are the nodes a streamStressSpawn call appends, from
	// Run's goroutine; parent is the node that appends this one.
	children []*streamStressNode
	parent   *streamStressNode
	// retryPanic is what retry.Retryable panics with, if it does;
	// retryGoexit says it calls runtime.Goexit.
	retryPanic  error
	retryGoexit bool

	// Set by the appender before the node joins st.nodes.
	begin, done int64 // the stream's append ticks before and after AppendWith
	late        bool  // Run had ended when AppendWith began
	afterClose  bool  // Close had returned when AppendWith began
	closeSeen   bool  // Close had begun when AppendWith returned
	handle      atomic.Pointer[StreamNode[string]]

	calls []streamStressCall // written by the node's function, on Run's goroutine

	mu            sync.Mutex
	resumes       []streamStressResume
	refusedResume bool // a Resume found the node's pause gone (Run's context ended first)

	val string // what Wait returned, once the stream ended
	err error
}

func (nd *streamStressNode) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s{%v", nd.id, nd.policy)
	if nd.retry != nil {
		fmt.Fprintf(&b, " retry %d", nd.retry.Attempts)
		if nd.retry.Backoff != nil {
			fmt.Fprintf(&b, "/%v", nd.retry.Backoff(1))
		}
		if nd.retry.AttemptTimeout > 0 {
			fmt.Fprintf(&b, " timeout %v", nd.retry.AttemptTimeout)
		}
		if nd.retryPanic != nil {
			b.WriteString(" Retryable panics")
		}
		if nd.retryGoexit {
			b.WriteString(" Retryable calls Goexit")
		}
	}
	for _, s := range nd.script {
		b.WriteString(" " + streamStressStepNames[s])
	}
	if nd.refused != nil {
		b.WriteString(" refused")
	}
	fmt.Fprintf(&b, " mode %d", nd.mode)
	if nd.late {
		b.WriteString(" late")
	}
	fmt.Fprintf(&b, " calls %d", len(nd.calls))
	for _, r := range nd.resumes {
		fmt.Fprintf(&b, " resume %d@%d", r.kind, r.at)
	}
	if nd.err != nil {
		fmt.Fprintf(&b, " err %v", nd.err)
	} else {
		fmt.Fprintf(&b, " val %q", nd.val)
	}
	b.WriteString("}")
	return b.String()
}

// streamStress is one stream of TestConcurrentStreamsKeepTheirContract.
type streamStress struct {
	seed    uint64
	s       *Stream[string]
	initial string
	cause   error // of Run's context's end
	ctxMode int   // 0 none, 1 a cancel after cancelAfter, 2 a deadline after cancelAfter
	ctxEnds bool
	// closeMode: 0 no Close, 1 Close at once (before Run, often), 2
	// after closeAfter, 3 after the producers.
	closeMode   int
	twoClosers  bool // Close is called twice at once
	twoRuns     bool // Run is called twice at once: one of them runs the stream
	closeAfter  time.Duration
	cancelAfter time.Duration
	first       []*streamStressNode   // appended before Run
	producers   [][]*streamStressNode // appended by a goroutine each
	lateNodes   []*streamStressNode   // appended after Run ended
	suspends    int                   // nodes under PolicySuspend

	resumers    sync.WaitGroup
	refusedRuns atomic.Int32 // Run calls that returned ErrStreamStarted
	inflight    atomic.Int32
	clock       atomic.Int64
	ticks       atomic.Int64
	last        atomic.Pointer[streamStressNode] // the last node whose function began
	runEnded    atomic.Bool
	closed      atomic.Bool // Close returned

	// Written by Run's goroutine before it ends.
	runReturned, goexited bool
	runErr                error

	hung bool // the plan did not end within seconds

	runCtx context.Context // Run's (a node's function gets it, or one its AttemptTimeout bounds)

	mu           sync.Mutex
	closeStarted bool
	nodes        []*streamStressNode // in the order their appends returned
	closeErrs    []error
	problems     []string
}

func (st *streamStress) bad(format string, args ...any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.problems) < 20 {
		st.problems = append(st.problems, fmt.Sprintf(format, args...))
	}
}

func (st *streamStress) plan() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ctx %d after %v, close %d after %v; Run returned %v (%v), goexited %v, Close %v",
		st.ctxMode, st.cancelAfter, st.closeMode, st.closeAfter, st.runReturned, st.runErr, st.goexited, st.closeErrs)
	for _, nd := range st.nodes {
		b.WriteString("\n  " + nd.String())
	}
	return b.String()
}

func newStreamStress(seed uint64) *streamStress {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	st := &streamStress{seed: seed, initial: "s" + strconv.FormatUint(seed%1000, 10)}
	st.s = NewStream(st.initial)
	st.cause = &streamStressErr{node: "Run's context", call: -1}
	st.ctxMode = rng.IntN(4) - 1 // -1 and 0: none
	if st.ctxMode > 0 {
		st.ctxEnds = true
		st.cancelAfter = time.Duration(rng.IntN(4000)) * time.Microsecond
	} else {
		st.ctxMode = 0
	}
	st.closeMode = rng.IntN(4)
	if st.closeMode == 0 && !st.ctxEnds {
		st.closeMode = 3
	}
	st.closeAfter = time.Duration(rng.IntN(2000)) * time.Microsecond
	st.twoClosers, st.twoRuns = rng.IntN(4) == 0, rng.IntN(4) == 0
	// One node of some plans calls runtime.Goexit, or has a Retryable
	// that does.
	goexit, retryGoexit := false, false
	switch rng.IntN(8) {
	case 0:
		goexit = true
	case 1:
		retryGoexit = true
	}
	var node func(id string) *streamStressNode
	node = func(id string) *streamStressNode {
		nd := &streamStressNode{id: id, mode: rng.IntN(3), delay: time.Duration(rng.IntN(300)) * time.Microsecond}
		nd.sleep = time.Duration(rng.IntN(500)) * time.Microsecond
		switch x := rng.IntN(20); {
		case x < 6:
			nd.script = []streamStressStep{streamStressOK}
		case x < 9:
			nd.script = []streamStressStep{streamStressFail, streamStressOK}
		case x < 11:
			nd.script = []streamStressStep{streamStressFail}
		case x < 12:
			nd.script = []streamStressStep{streamStressFail, streamStressFail, streamStressOK}
		case x < 13:
			nd.script = []streamStressStep{streamStressPanic}
		case x < 14:
			nd.script = []streamStressStep{streamStressPanic, streamStressOK}
		case x < 16:
			nd.script = []streamStressStep{streamStressSleep}
		case x < 18:
			nd.script = []streamStressStep{streamStressCtx}
		default:
			nd.script = []streamStressStep{streamStressFail, streamStressSleep}
		}
		if goexit && rng.IntN(4) == 0 {
			nd.script = []streamStressStep{streamStressGoexit}
			goexit = false
		} else if !strings.Contains(id, "c") && rng.IntN(12) == 0 {
			nd.script = []streamStressStep{streamStressSpawn}
			for k := range 1 + rng.IntN(2) {
				ch := node(nd.id + "c" + strconv.Itoa(k))
				ch.parent = nd
				nd.children = append(nd.children, ch)
			}
		}
		switch x := rng.IntN(20); {
		case x < 5:
			nd.policy = PolicyFail
		case x < 12:
			nd.policy = PolicyContinue
		case x < 14:
			nd.policy = PolicyEnd
		case x < 19:
			nd.policy = PolicySuspend
			st.suspends++
		default:
			nd.policy = PolicyContinue
			if rng.IntN(2) == 0 {
				nd.policy, nd.refused = FailurePolicy(77), ErrBadPolicy
			} else {
				nd.retry, nd.refused = &RetryPolicy{}, ErrBadRetry
			}
		}
		if nd.refused == nil && rng.IntN(5) < 2 {
			nd.retry = &RetryPolicy{
				Attempts: 1 + rng.IntN(3),
				Backoff:  ConstantBackoff(time.Duration(rng.IntN(4)) * 300 * time.Microsecond),
			}
			x := rng.IntN(8)
			if retryGoexit && rng.IntN(2) == 0 {
				x = 0
			}
			switch x {
			case 0:
				// A Retryable that panics, or calls runtime.Goexit: the
				// node's first failure, if it has attempts left, is its
				// last (and Run's, with Goexit).
				if retryGoexit {
					nd.retry.Retryable = func(error) bool { runtime.Goexit(); return false }
					nd.retryGoexit, retryGoexit = true, false
					break
				}
				marker := &streamStressErr{node: nd.id + " (Retryable)", call: -1}
				nd.retry.Retryable = func(error) bool { panic(marker) }
				nd.retryPanic = marker
			case 1, 2:
				nd.retry.AttemptTimeout = time.Duration(200+rng.IntN(800)) * time.Microsecond
				if nd.script[0] == streamStressOK || nd.script[0] == streamStressSleep {
					nd.script = []streamStressStep{streamStressOvertime, streamStressOK}
				} else if rng.IntN(2) == 0 {
					nd.script = []streamStressStep{streamStressOvertime}
				}
			}
		}
		if nd.policy == PolicyFail && nd.retry == nil && rng.IntN(2) == 0 {
			nd.append = true
		}
		return nd
	}
	for k := range rng.IntN(4) {
		st.first = append(st.first, node("f"+strconv.Itoa(k)))
	}
	for p := range 1 + rng.IntN(3) {
		var nodes []*streamStressNode
		for k := range 1 + rng.IntN(5) {
			nodes = append(nodes, node(fmt.Sprintf("p%d.%d", p, k)))
		}
		st.producers = append(st.producers, nodes)
	}
	if rng.IntN(3) == 0 {
		for k := range 1 + rng.IntN(2) {
			st.lateNodes = append(st.lateNodes, node("l"+strconv.Itoa(k)))
		}
	}
	return st
}

// fn returns nd's function: it does what nd's script says, and checks
// that no other node runs meanwhile, that the node before it ended and
// that nd has not.
func (st *streamStress) fn(nd *streamStressNode) StreamFunc[string] {
	return func(ctx context.Context, prev string) (string, error) {
		if n := st.inflight.Add(1); n != 1 {
			st.bad("node %s began while %d other nodes ran", nd.id, n-1)
		}
		k := len(nd.calls)
		h := nd.handle.Load()
		if k == 0 {
			if p := st.last.Swap(nd); p != nil {
				if ph := p.handle.Load(); ph != nil && !isClosed(ph.Done()) {
					st.bad("node %s began before node %s, which began before it, ended", nd.id, p.id)
				}
			}
		}
		if h != nil {
			if a := h.Attempts(); a != k+1 {
				st.bad("call %d of node %s: Attempts is %d, want %d", k, nd.id, a, k+1)
			}
			if isClosed(h.Done()) {
				st.bad("node %s is called though it ended", nd.id)
			}
		}
		step := nd.script[min(k, len(nd.script)-1)]
		nd.calls = append(nd.calls, streamStressCall{input: prev, step: step, enter: st.clock.Add(1)})
		c := &nd.calls[k]
		defer func() {
			c.ctxEnded = st.runCtx.Err() != nil
			c.exit = st.clock.Add(1)
			if h != nil && isClosed(h.Done()) {
				st.bad("node %s ended while its function ran", nd.id)
			}
			st.inflight.Add(-1)
		}()
		switch step {
		case streamStressFail:
			c.val, c.err = prev+"/"+nd.id+"!", &streamStressErr{node: nd.id, call: k}
			return c.val, c.err
		case streamStressPanic:
			c.panicked = &streamStressErr{node: nd.id, call: k}
			panic(c.panicked)
		case streamStressGoexit:
			runtime.Goexit()
		case streamStressSleep:
			time.Sleep(nd.sleep)
		case streamStressCtx:
			tm := time.NewTimer(nd.sleep)
			defer tm.Stop()
			select {
			case <-ctx.Done():
				c.val, c.err = prev+"/"+nd.id+"?", &streamStressErr{node: nd.id, call: k, ctx: ctx.Err()}
				return c.val, c.err
			case <-tm.C:
			}
		case streamStressSpawn:
			if k == 0 {
				crng := rand.New(rand.NewPCG(st.seed, 5))
				for _, ch := range nd.children {
					st.appendNode(ch, crng)
				}
			}
		case streamStressOvertime:
			<-ctx.Done()
			v := prev + "/" + nd.id + "~"
			// Run ends the attempt with the *AttemptTimeoutError that
			// ended ctx, or takes v if Run's context ended first.
			if cause := context.Cause(ctx); errors.As(cause, new(*AttemptTimeoutError)) {
				c.err = cause
			} else {
				c.val = v
			}
			return v, nil
		}
		c.val = prev + "/" + nd.id
		return c.val, nil
	}
}

// appendNode appends nd, records it, checks what must hold at once and
// starts its resumer.
func (st *streamStress) appendNode(nd *streamStressNode, rng *rand.Rand) {
	late, afterClose := st.runEnded.Load(), st.closed.Load()
	nd.begin = st.ticks.Load()
	var opts []StreamNodeOption
	if nd.retry != nil {
		opts = append(opts, StreamRetry(*nd.retry))
	}
	var h *StreamNode[string]
	if nd.append {
		h = st.s.Append(st.fn(nd))
	} else {
		h = st.s.AppendWith(st.fn(nd), nd.policy, opts...)
	}
	nd.handle.Store(h)
	nd.done = st.ticks.Add(1)
	endedAtOnce := isClosed(h.Done())
	st.mu.Lock()
	nd.late, nd.afterClose, nd.closeSeen = late, afterClose, st.closeStarted
	st.nodes = append(st.nodes, nd)
	st.mu.Unlock()
	if (nd.refused != nil || late || afterClose) && !endedAtOnce {
		st.bad("node %s did not end at once (refused %v, after Run ended %v, after Close returned %v)", nd.id, nd.refused, late, afterClose)
	}
	if (h.Suspended() != nil) != (nd.policy == PolicySuspend) {
		st.bad("node %s under %v: Suspended is %v", nd.id, nd.policy, h.Suspended())
	}
	if nd.policy == PolicySuspend && nd.refused == nil {
		seed := rng.Uint64()
		st.resumers.Go(func() { st.resume(nd, h, rand.New(rand.NewPCG(seed, 1))) })
	}
}

// resume resumes nd each time it pauses, at random: Rerun (three times at
// most), SucceedWith or FailWith, or two of the last two at once; or,
// when Run's context ends, leaves it to that end.
func (st *streamStress) resume(nd *streamStressNode, h *StreamNode[string], rng *rand.Rand) {
	how := func(kind, k int) (Resumption, streamStressResume) {
		r := streamStressResume{kind: kind, at: h.Attempts()}
		switch kind {
		case streamStressRerun:
			return Rerun(), r
		case streamStressSucceed:
			r.val = fmt.Sprintf("R%s.%d", nd.id, k)
			return SucceedWith(r.val), r
		}
		r.err = &streamStressErr{node: nd.id + " (FailWith)", call: k}
		return FailWith(r.err), r
	}
	accepted := func(r streamStressResume) {
		nd.mu.Lock()
		nd.resumes = append(nd.resumes, r)
		nd.mu.Unlock()
	}
	refused := func(err error) {
		if !errors.Is(err, ErrNotPending) || !st.ctxEnds {
			st.bad("Resume of node %s, which paused: %v", nd.id, err)
		}
		nd.mu.Lock()
		nd.refusedResume = true
		nd.mu.Unlock()
	}
	for reruns := 0; ; {
		select {
		case <-h.Suspended():
		case <-h.Done():
			return
		}
		if !st.ctxEnds && isClosed(h.Done()) {
			st.bad("node %s paused, and ended without a resumption", nd.id)
			return
		}
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
		}
		if st.ctxEnds && rng.IntN(5) == 0 {
			<-h.Done() // left to the end of Run's context
			return
		}
		kind := rng.IntN(3)
		if reruns >= 3 {
			kind = 1 + rng.IntN(2)
		}
		if kind != streamStressRerun && st.suspends == 1 && rng.IntN(3) == 0 {
			// Two at once: one of them decides, unless Run's context
			// ended first. (With one suspending node only, so that a
			// Resume that lost cannot resume a later node.)
			how1, r1 := how(kind, 2*reruns)
			how2, r2 := how(3-kind, 2*reruns+1)
			var err1 error
			var wg sync.WaitGroup
			wg.Go(func() { err1 = st.s.Resume(how1) })
			err2 := st.s.Resume(how2)
			wg.Wait()
			switch {
			case err1 == nil && err2 == nil:
				st.bad("two Resume calls at once of node %s both succeeded", nd.id)
			case err1 == nil:
				accepted(r1)
				if !errors.Is(err2, ErrNotPending) {
					st.bad("the Resume of node %s that lost: %v", nd.id, err2)
				}
			case err2 == nil:
				accepted(r2)
				if !errors.Is(err1, ErrNotPending) {
					st.bad("the Resume of node %s that lost: %v", nd.id, err1)
				}
			default:
				refused(err1)
				refused(err2)
			}
			<-h.Done()
			return
		}
		rs, r := how(kind, reruns)
		if err := st.s.Resume(rs); err != nil {
			refused(err)
			<-h.Done()
			return
		}
		accepted(r)
		if kind != streamStressRerun {
			<-h.Done()
			return
		}
		reruns++
	}
}

// misuse checks that Resume refuses what it must, whatever the stream's
// state: a value of the wrong type, FailWith(nil), the zero Resumption,
// and any resumption when no node can pause.
func (st *streamStress) misuse(rng *rand.Rand) {
	switch rng.IntN(4) {
	case 0:
		if err := st.s.Resume(SucceedWith(42)); !errors.Is(err, ErrResultType) {
			st.bad("Resume(SucceedWith(42)) of a Stream[string]: %v", err)
		}
	case 1:
		if err := st.s.Resume(FailWith(nil)); err == nil || errors.Is(err, ErrNotPending) {
			st.bad("Resume(FailWith(nil)): %v", err)
		}
	case 2:
		if err := st.s.Resume(Resumption{}); err == nil || errors.Is(err, ErrNotPending) {
			st.bad("Resume(Resumption{}): %v", err)
		}
	default:
		if st.suspends == 0 {
			if err := st.s.Resume(Rerun()); !errors.Is(err, ErrNotPending) {
				st.bad("Resume(Rerun()) of a stream with no node to pause: %v", err)
			}
		}
	}
}

func (st *streamStress) closeStream() {
	st.mu.Lock()
	st.closeStarted = true
	before := slices.Clone(st.nodes)
	st.mu.Unlock()
	err := st.s.Close()
	st.closed.Store(true)
	for _, nd := range before {
		if !isClosed(nd.handle.Load().Done()) {
			st.bad("Close returned before node %s, appended before it, ended", nd.id)
		}
	}
	if again := st.s.Close(); again != err {
		st.bad("Close returned %v, then %v", err, again)
	}
	st.mu.Lock()
	st.closeErrs = append(st.closeErrs, err)
	st.mu.Unlock()
}

// run runs the stream's plan, then checks what happened.
func (st *streamStress) run() {
	rng := rand.New(rand.NewPCG(st.seed, 2))
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if st.ctxMode == 2 {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadlineCause(ctx, time.Now().Add(st.cancelAfter), st.cause)
		defer stop()
	}
	st.runCtx = ctx
	var noCtx context.Context
	if err := st.s.Run(noCtx); err != ErrNilContext {
		st.bad("Run(nil): %v", err)
	}
	var wg sync.WaitGroup
	for _, nd := range st.first {
		st.appendNode(nd, rng)
	}
	if st.closeMode == 1 {
		wg.Go(st.closeStream)
		if st.twoClosers {
			wg.Go(st.closeStream)
		}
	}
	var producers sync.WaitGroup
	for _, nodes := range st.producers {
		prng := rand.New(rand.NewPCG(rng.Uint64(), 3))
		producers.Go(func() {
			for k, nd := range nodes {
				if prng.IntN(8) == 0 {
					st.misuse(prng)
				}
				switch nd.mode {
				case 1:
					time.Sleep(nd.delay)
				case 2:
					if k > 0 {
						<-nodes[k-1].handle.Load().Done()
					}
				}
				st.appendNode(nd, prng)
			}
		})
	}
	if st.ctxMode == 1 {
		wg.Go(func() {
			time.Sleep(st.cancelAfter)
			cancel(st.cause)
		})
	}
	runDone := make(chan struct{}) // closed when the Run that runs the stream ended
	var runners sync.WaitGroup
	runner := func() {
		returned, won := false, true
		defer func() {
			if won {
				st.goexited = !returned
				st.runEnded.Store(true)
				close(runDone)
			}
		}()
		err := st.s.Run(ctx)
		returned = true
		if err == ErrStreamStarted {
			won = false
			st.refusedRuns.Add(1)
			return
		}
		st.runErr, st.runReturned = err, true
	}
	runners.Go(runner)
	if st.twoRuns {
		runners.Go(runner)
	}
	closeStream := func() {
		if st.twoClosers {
			wg.Go(st.closeStream)
		}
		st.closeStream()
	}
	switch st.closeMode {
	case 2:
		wg.Go(func() {
			time.Sleep(st.closeAfter)
			closeStream()
		})
	case 3:
		wg.Go(func() {
			producers.Wait()
			closeStream()
		})
	}
	if len(st.lateNodes) > 0 {
		lrng := rand.New(rand.NewPCG(rng.Uint64(), 4))
		wg.Go(func() {
			<-runDone
			for _, nd := range st.lateNodes {
				st.appendNode(nd, lrng)
			}
		})
	}
	all := make(chan struct{})
	go func() {
		producers.Wait()
		wg.Wait()
		<-runDone
		runners.Wait()
		st.resumers.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		st.hung = true
		st.bad("the stream hangs")
		cancel(st.cause)
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			return // the leak check reports what is left
		}
	}
	if err := st.s.Run(ctx); err != ErrStreamStarted {
		st.bad("a Run after the stream's: %v", err)
	}
	var refused int32 // of the Run calls at once, all but one
	if st.twoRuns {
		refused = 1
	}
	if n := st.refusedRuns.Load(); n != refused {
		st.bad("of %d Run calls at once, %d returned ErrStreamStarted", refused+1, n)
	}
	st.check()
}

// check checks the stream, once every goroutine of its plan ended.
func (st *streamStress) check() {
	var chain []*streamStressNode // the nodes that ran, in the order they began
	for _, nd := range st.nodes {
		h := nd.handle.Load()
		if !isClosed(h.Done()) {
			st.bad("node %s never ended", nd.id)
			continue
		}
		nd.val, nd.err = h.Wait()
		if a := h.Attempts(); a != len(nd.calls) {
			st.bad("node %s: Attempts is %d, its function was called %d times", nd.id, a, len(nd.calls))
		}
		if nd.refused != nil {
			if !errors.Is(nd.err, nd.refused) || nd.val != "" || len(nd.calls) > 0 {
				st.bad("node %s, which AppendWith must refuse with %v: %q, %v, %d calls", nd.id, nd.refused, nd.val, nd.err, len(nd.calls))
			}
			continue
		}
		if len(nd.calls) > 0 {
			chain = append(chain, nd)
		}
	}
	if len(st.problems) > 0 {
		return
	}
	slices.SortFunc(chain, func(a, b *streamStressNode) int { return int(a.calls[0].enter - b.calls[0].enter) })
	pos := map[*streamStressNode]int{}
	var ctxEnded *streamStressNode // a node whose call returned after Run's context ended
	for i, nd := range chain {
		pos[nd] = i
		if i > 0 {
			if p := chain[i-1]; p.calls[len(p.calls)-1].exit > nd.calls[0].enter {
				st.bad("node %s began before node %s returned", nd.id, p.id)
			}
		}
		for k, c := range nd.calls {
			if ctxEnded != nil {
				st.bad("call %d of node %s began after Run's context ended (a call of node %s saw it end)", k, nd.id, ctxEnded.id)
			}
			if c.ctxEnded && ctxEnded == nil {
				ctxEnded = nd
			}
		}
	}
	// The order the appends took effect: a node whose AppendWith returned
	// before another's began comes first.
	for _, a := range st.nodes {
		for _, b := range st.nodes {
			if a == b || a.refused != nil || b.refused != nil || a.done > b.begin || len(b.calls) == 0 {
				continue
			}
			if len(a.calls) == 0 {
				st.bad("node %s ran, and node %s, appended before it, did not (%v)", b.id, a.id, a.err)
			} else if pos[a] > pos[b] {
				st.bad("node %s ran before node %s, appended before it", b.id, a.id)
			}
		}
	}
	for _, nd := range chain {
		if p := nd.parent; p != nil && (len(p.calls) == 0 || pos[p] > pos[nd]) {
			st.bad("node %s ran before node %s, which appended it as it ran", nd.id, p.id)
		}
	}
	cur, stopper := st.initial, -1
	var wantRun error // with stopper: what Run must return, or Close if Run's goroutine ends
	wantGoexit := false
	for i, nd := range chain {
		for k, c := range nd.calls {
			if c.input != cur {
				st.bad("call %d of node %s got %q, want %q, the value of the last node that succeeded before it", k, nd.id, c.input, cur)
			}
		}
		if stopper >= 0 {
			st.bad("node %s ran after node %s stopped the stream", nd.id, chain[stopper].id)
		}
		if stops, runErr, goexit := st.outcome(nd, i); stops {
			stopper, wantRun, wantGoexit = i, runErr, goexit
		}
		if nd.err == nil {
			cur = nd.val
		}
	}
	// How the stream ended: what Run and Close returned, and the error of
	// the nodes that did not run.
	stopErr := st.runErr
	switch {
	case stopper >= 0 && wantGoexit:
		if !st.goexited || st.runReturned {
			st.bad("node %s (or its Retryable) called runtime.Goexit; Run returned %v (%v)", chain[stopper].id, st.runReturned, st.runErr)
		}
		stopErr = wantRun
	case st.goexited:
		st.bad("Run's goroutine ended, and no node called runtime.Goexit")
	case stopper >= 0:
		var want, got *StreamEndError
		if errors.As(wantRun, &want) {
			if !errors.As(st.runErr, &got) || got.Position != want.Position || got.Err != want.Err {
				st.bad("node %s ended the stream under PolicyEnd at %d with %v; Run returned %v", chain[stopper].id, want.Position, want.Err, st.runErr)
			}
		} else if st.runErr != wantRun {
			st.bad("node %s stopped the stream with %v; Run returned %v", chain[stopper].id, wantRun, st.runErr)
		}
	case st.runErr == nil:
		if !st.closeStarted {
			st.bad("Run returned nil, and Close was not called")
		}
	case st.runErr == st.cause:
		if !st.ctxEnds {
			st.bad("Run returned its context's cause, and the context did not end")
		}
	default:
		st.bad("Run returned %v, and no node stopped the stream", st.runErr)
	}
	for _, err := range st.closeErrs {
		if err != stopErr {
			st.bad("Close returned %v, Run %v", err, stopErr)
		}
	}
	for _, nd := range st.nodes {
		if nd.refused != nil || len(nd.calls) > 0 {
			continue
		}
		if nd.val != "" {
			st.bad("node %s did not run, and has the value %q", nd.id, nd.val)
		}
		if isClosed(nd.handle.Load().Suspended()) {
			st.bad("node %s did not run, and its Suspended is closed", nd.id)
		}
		switch {
		case nd.afterClose:
			if nd.err != ErrStreamClosed {
				st.bad("node %s, appended after Close returned: %v", nd.id, nd.err)
			}
		case stopErr == nil:
			if nd.err != ErrStreamClosed {
				st.bad("node %s did not run, the stream was closed, and its error is %v", nd.id, nd.err)
			} else if !nd.closeSeen {
				st.bad("node %s, appended before Close, did not run", nd.id)
			}
		case nd.closeSeen && nd.err == ErrStreamClosed:
		case !errors.Is(nd.err, ErrStreamStopped) || !errors.Is(nd.err, stopErr):
			st.bad("node %s did not run, the stream stopped with %v, and its error is %v", nd.id, stopErr, nd.err)
		}
	}
}

// mayTimeOut reports whether Run may have seen call j of nd fail with
// an *AttemptTimeoutError whatever the call returned: its bound passes
// at any time, and only a panic wins over it.
func (nd *streamStressNode) mayTimeOut(j int) bool {
	c := &nd.calls[j]
	return nd.retry != nil && nd.retry.AttemptTimeout > 0 && c.panicked == nil && c.step != streamStressGoexit
}

// failedWith reports whether err is, or wraps, the failure of call j of
// nd as Run saw it: the call's own, or its *AttemptTimeoutError.
func (nd *streamStressNode) failedWith(err error, j int) bool {
	if f := nd.calls[j].failure(); f != nil && errors.Is(err, f) {
		return true
	}
	var ate *AttemptTimeoutError
	return nd.mayTimeOut(j) && errors.As(err, &ate) && ate.Attempt == j+1 && ate.Timeout == nd.retry.AttemptTimeout
}

// outcome checks how a node that ran ended, against its calls, its
// policy, its retries and its resumptions, and reports whether it stopped
// the stream, and if so what Run must return.
func (st *streamStress) outcome(nd *streamStressNode, pos int) (stops bool, runErr error, goexit bool) {
	calls := nd.calls
	j := len(calls) - 1
	last := &calls[j]
	attempts := 1 // a round's attempts, at most
	if nd.retry != nil && nd.retryPanic == nil && !nd.retryGoexit {
		attempts = nd.retry.Attempts
	}
	// Its rounds of attempts: the first, and one per Rerun.
	starts := []int{0}
	for k, r := range nd.resumes {
		if r.at > len(calls) || r.at <= starts[len(starts)-1] {
			st.bad("node %s was resumed after attempt %d of %d, its round began after %d", nd.id, r.at, len(calls), starts[len(starts)-1])
		}
		if r.kind == streamStressRerun {
			starts = append(starts, r.at)
		} else if k != len(nd.resumes)-1 {
			st.bad("node %s was resumed after a resumption that ended it", nd.id)
		}
	}
	for r, s := range starts {
		e := len(calls)
		if r+1 < len(starts) {
			e = starts[r+1]
		}
		if e == s && r+1 < len(starts) {
			st.bad("node %s was rerun without running", nd.id)
		}
		for k := s; k < e; k++ {
			c := &calls[k]
			more := k-s+1 < attempts
			if k < e-1 && (c.err == nil && !nd.mayTimeOut(k) || !more) {
				st.bad("call %d of node %s was retried: it returned %v, %d attempts of %d", k, nd.id, c.failure(), k-s+1, attempts)
			}
			if k == e-1 && c.err != nil && more && !st.ctxEnds {
				st.bad("call %d of node %s failed with %v and was not retried, %d attempts of %d", k, nd.id, c.err, k-s+1, attempts)
			}
			if k == e-1 && r+1 < len(starts) && c.failure() == nil && !nd.mayTimeOut(k) {
				st.bad("node %s was rerun after call %d succeeded", nd.id, k)
			}
		}
	}
	var lastRes *streamStressResume
	if len(nd.resumes) > 0 {
		lastRes = &nd.resumes[len(nd.resumes)-1]
	}
	decided := lastRes != nil && lastRes.kind != streamStressRerun
	if decided && lastRes.at != len(calls) {
		st.bad("node %s ran after it was resumed with %d", nd.id, lastRes.kind)
	}
	if nd.policy == PolicySuspend {
		// Suspended is closed when the node paused in its last round: a
		// resumption that ended it says it did, a success that it did
		// not.
		paused := isClosed(nd.handle.Load().Suspended())
		if decided && !paused || !decided && nd.err == nil && paused {
			st.bad("node %s, resumed with %v, ended with %v; Suspended closed: %v", nd.id, lastRes, nd.err, paused)
		}
	}
	if nd.refusedResume && !errors.Is(nd.err, st.cause) {
		st.bad("a Resume of node %s found no pause, and it ended with %v", nd.id, nd.err)
	}
	v, err := nd.val, nd.err
	switch {
	case decided && lastRes.kind == streamStressSucceed:
		if err != nil || v != lastRes.val {
			st.bad("node %s, resumed with SucceedWith(%q): %q, %v", nd.id, lastRes.val, v, err)
		}
		return false, nil, false
	case decided:
		if err != lastRes.err || v != "" {
			st.bad("node %s, resumed with FailWith(%v): %q, %v", nd.id, lastRes.err, v, err)
		}
		return true, lastRes.err, false
	case last.step == streamStressGoexit:
		if !errors.Is(err, ErrGoexit) || v != "" {
			st.bad("node %s called runtime.Goexit: %q, %v", nd.id, v, err)
		}
		return true, ErrGoexit, true
	case err == nil:
		if last.failure() != nil || v != last.val {
			st.bad("node %s succeeded with %q; its last call returned %q, %v", nd.id, v, last.val, last.failure())
		}
		return false, nil, false
	case last.failure() == nil && !nd.mayTimeOut(j):
		st.bad("node %s failed with %v; its last call succeeded", nd.id, err)
		return true, err, false
	}
	// The value of a failed node: the last call's, unless it panicked or
	// passed its AttemptTimeout.
	wantV := ""
	if last.err != nil && errors.Is(err, last.err) {
		wantV = last.val
	}
	// Retryable was asked about the last call: it failed with attempts
	// left (and was not a Rerun's, yet to be made).
	inRound := len(calls) - starts[len(starts)-1]
	asked := nd.retry != nil && inRound > 0 && inRound < nd.retry.Attempts
	if nd.retryGoexit && asked {
		if !errors.Is(err, ErrGoexit) || !nd.failedWith(err, j) || v != wantV {
			st.bad("node %s, whose Retryable calls runtime.Goexit, failed with %v: %q, %v", nd.id, last.failure(), v, err)
		}
		return true, err, true
	}
	if st.ctxEnds && errors.Is(err, st.cause) {
		// Run's context ended while the node was suspended, waited for
		// its next attempt, or was to be rerun.
		rerun := lastRes != nil && lastRes.at == len(calls)
		switch {
		case v != "":
			st.bad("node %s, stopped by the end of Run's context, has the value %q", nd.id, v)
		case rerun && !errors.Is(err, ErrStreamStopped):
			st.bad("node %s, to be rerun as Run's context ended: %v", nd.id, err)
		case !rerun && !nd.failedWith(err, j):
			st.bad("node %s, stopped by the end of Run's context after its failure %v: %v", nd.id, last.failure(), err)
		case !rerun && nd.policy != PolicySuspend && (last.err == nil && !nd.mayTimeOut(j) || len(calls)-starts[len(starts)-1] >= attempts):
			st.bad("node %s ended with Run's context as it waited for an attempt it could not make: %v", nd.id, err)
		}
		return true, st.cause, false
	}
	if nd.policy == PolicySuspend {
		st.bad("node %s, under PolicySuspend, ended with %v without a resumption", nd.id, err)
	}
	var pe *PanicError
	switch {
	case nd.retryPanic != nil && asked:
		// Retryable was asked, and panicked.
		if !errors.As(err, &pe) || pe.Value != nd.retryPanic || !nd.failedWith(err, j) || v != wantV {
			st.bad("node %s, whose Retryable panics, failed with %v: %q, %v", nd.id, last.failure(), v, err)
		}
	case last.panicked != nil:
		if !errors.As(err, &pe) || pe.Value != last.panicked || v != "" {
			st.bad("node %s panicked with %v: %q, %v", nd.id, last.panicked, v, err)
		}
	case err == last.err:
		if v != last.val {
			st.bad("node %s failed; its last call returned %q, its Wait %q", nd.id, last.val, v)
		}
	default:
		// Only its AttemptTimeout may have replaced the call's outcome.
		ate, ok := err.(*AttemptTimeoutError)
		if !ok || !nd.failedWith(err, j) || ate.ID != "" || v != "" {
			st.bad("node %s failed; its last call returned %q, %v; its Wait %q, %v", nd.id, last.val, last.err, v, err)
		}
	}
	switch nd.policy {
	case PolicyContinue:
		return false, nil, false
	case PolicyEnd:
		return true, &StreamEndError{Position: pos + 1, Err: err}, false
	}
	return true, err, false
}
