package asynctool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flowStressRun is one run of TestConcurrentRunsKeepFlowRules: its id
// (every value it makes is id*1000 plus a tag below 1000) and what its
// workers are to do.
type flowStressRun struct {
	id         int
	bad        *planStressBad
	flakyFails int32 // flaky fails its first flakyFails attempts (of 3)
	timedFails bool  // every attempt of timed fails
	suspFails  int32 // susp fails its first suspFails attempts (2 a round)
	endFails   bool  // ender fails, under PolicyEnd
	prodFails  int32 // prod fails its first prodFails attempts (of 2)
	itemFails  uint8 // bit k: item k of each fails
	shortLived bool  // the run has a group deadline of a few milliseconds

	flaky, susp, prod atomic.Int32 // attempts begun

	// The stream of the run: prod appends to it, drain runs it, reader
	// reads its nodes in append order from handles.
	stream  *Stream[int]
	handles chan flowStreamHandle
	// pending hears OnNodePending (of susp, or of jCustom that its
	// join suspended), for the resumer.
	pending chan string

	mu       sync.Mutex
	resumed  map[string][]int // by node, the kinds of the resumptions Resume accepted, in order
	hooks    []*flowStressHookRun
	streamed int // successful stream nodes reader saw
}

type flowStressKey struct{}
type flowStressHookKey struct{}

func flowRunOf(ctx context.Context) *flowStressRun {
	fr, _ := ctx.Value(flowStressKey{}).(*flowStressRun)
	return fr
}

// flowStressErr is the failure of a worker (or a stream node) of run id.
type flowStressErr struct {
	id   int
	what string
}

func (e *flowStressErr) Error() string { return e.what + " of run " + strconv.Itoa(e.id) + " failed" }

// errFlowStreamDone is the failure of the stream's last node, under
// PolicyEnd, which ends the stream's Run.
var errFlowStreamDone = errors.New("the producer is done")

// flowStreamHandle is one node appended to a run's stream, and what it
// does: "ok" returns prev+1, "retried" too after a failed first attempt,
// "bad" fails under PolicyContinue, "last" fails under PolicyEnd.
type flowStreamHandle struct {
	n    *StreamNode[int]
	kind string
}

// flowStressHookRun counts one (sub-)run's hook calls, OnNodeTimeout's
// too, and keeps the report OnRunEnd got.
type flowStressHookRun struct {
	planStressHookRun
	timeouts map[int]int
	endRep   *Report
}

// flowNap waits up to max, or until ctx ends.
func flowNap(ctx context.Context, max time.Duration) {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(max))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// flowStressPlan is one compiled plan of the test and the rules its
// nodes were given.
type flowStressPlan struct {
	pl      *Plan
	policy  map[string]FailurePolicy // flaky's and timed's
	joins   map[string]Join          // the join nodes' joins
	named   []string                 // the ids jNamed names
	atLeast int                      // jAtLeast's n
	custom  int                      // successes jCustom runs on
	// customSuspends: jCustom's join suspends it (DecideSuspend) where
	// it would fail it.
	customSuspends bool
	enderTimeout   time.Duration // ender's own Timeout, 0 for none
	eachJoin       Join
	eachN          int // successes eachJoin needs: 0 for the zero Join
}

// flowJoinIDs are the nodes of the plans whose joins the test checks.
var flowJoinIDs = []string{"jAny", "jAtLeast", "jNamed", "jCustom", "jAllDone"}

// flowIDs are every node of the plans.
var flowIDs = append([]string{"src", "flaky", "timed", "susp", "afterSusp", "ender", "prod", "drain", "reader", "each"}, flowJoinIDs...)

// buildFlowStressPlan compiles one plan, its edges declared in an order
// that seed picks. src starts it; flaky retries with an exponential
// backoff; timed retries under its own Timeout (and, in some plans, an
// AttemptTimeout), both under PolicyFail or PolicyContinue; susp retries
// once, then is suspended, and afterSusp needs it; ender fails under
// PolicyEnd; prod appends to the run's stream (and is retried), drain
// runs the stream and reader reads it as it grows; each is a ForEach
// with a Limit and a Budget, with or without a Join; and the join nodes
// (AnySucceeded, AtLeast, NamedSucceeded, CustomJoin, AllDone) each have
// a random subset of those as upstreams.
func buildFlowStressPlan(t *testing.T, seed uint64, calls map[string]*atomic.Int64) *flowStressPlan {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	fp := &flowStressPlan{policy: map[string]FailurePolicy{}, joins: map[string]Join{}}
	pick := func(ps ...FailurePolicy) FailurePolicy { return ps[rng.IntN(len(ps))] }
	tagged := func(tag int) WorkerFunc[int, int] {
		return func(ctx context.Context, _ int, _ Wrappers) (int, error) {
			return flowRunOf(ctx).id*1000 + tag, nil
		}
	}
	src := NewWrapper("src", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		flowNap(ctx, 100*time.Microsecond)
		return flowRunOf(ctx).id*1000 + 1, nil
	}), 0)
	fp.policy["flaky"] = pick(PolicyFail, PolicyContinue)
	flaky := NewWrapper("flaky", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		fr := flowRunOf(ctx)
		n := fr.flaky.Add(1)
		flowNap(ctx, 150*time.Microsecond)
		if n <= fr.flakyFails {
			return 0, &flowStressErr{fr.id, "flaky"}
		}
		return fr.id*1000 + 2, nil
	}), 0).Depend(src, true).Retry(RetryPolicy{Attempts: 3, Backoff: ExponentialBackoff(40*time.Microsecond, 300*time.Microsecond, 0.5)}).
		OnFailure(fp.policy["flaky"])
	fp.policy["timed"] = pick(PolicyFail, PolicyContinue)
	rp := RetryPolicy{Attempts: 3, Backoff: ConstantBackoff(150 * time.Microsecond)}
	if rng.IntN(2) == 0 {
		rp.AttemptTimeout = 400 * time.Microsecond
	}
	timed := NewWrapper("timed", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		fr := flowRunOf(ctx)
		flowNap(ctx, 600*time.Microsecond)
		if fr.timedFails {
			return 0, &flowStressErr{fr.id, "timed"}
		}
		return fr.id*1000 + 3, nil
	}), 0).Depend(src, true).Timeout(900 * time.Microsecond).Retry(rp).OnFailure(fp.policy["timed"])
	susp := NewWrapper("susp", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		fr := flowRunOf(ctx)
		if fr.susp.Add(1) <= fr.suspFails {
			return 0, &flowStressErr{fr.id, "susp"}
		}
		return fr.id*1000 + 4, nil
	}), 0).Depend(src, true).Retry(RetryPolicy{Attempts: 2}).OnFailure(PolicySuspend)
	afterSusp := NewWrapper("afterSusp", WorkerFunc[int, int](func(ctx context.Context, _ int, all Wrappers) (int, error) {
		up, err := susp.ResultFrom(all)
		if err != nil || up.State != ResultSuccess {
			return 0, fmt.Errorf("afterSusp reads susp: %v %w", up.State, err)
		}
		return up.Value + 100, nil
	}), 0).Depend(susp, true)
	ender := NewWrapper("ender", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		fr := flowRunOf(ctx)
		flowNap(ctx, time.Millisecond)
		if fr.endFails {
			return 0, &flowStressErr{fr.id, "ender"}
		}
		return fr.id*1000 + 6, nil
	}), 0).Depend(src, true).OnFailure(PolicyEnd)
	if rng.IntN(2) == 0 {
		// Its failure is settled a while after its worker returned,
		// often after the run's deadline or Cancel, which it must then
		// not end the run with (see PolicyEnd).
		ender.Retry(RetryPolicy{Attempts: 2, Retryable: func(error) bool {
			flowNap(context.Background(), 500*time.Microsecond)
			return false
		}})
	}
	if rng.IntN(2) == 0 {
		// Its own Timeout ends the run too, as its failure would.
		fp.enderTimeout = 800 * time.Microsecond
		ender.Timeout(fp.enderTimeout)
	}
	prod := NewWrapper("prod", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		fr := flowRunOf(ctx)
		n := fr.prod.Add(1)
		for range 4 {
			var h flowStreamHandle
			switch rand.IntN(4) {
			case 0:
				h = flowStreamHandle{fr.stream.AppendWith(func(ctx context.Context, prev int) (int, error) {
					return 0, &flowStressErr{flowRunOf(ctx).id, "stream node"}
				}, PolicyContinue), "bad"}
			case 1:
				var tries atomic.Int32
				h = flowStreamHandle{fr.stream.AppendWith(func(ctx context.Context, prev int) (int, error) {
					if tries.Add(1) == 1 {
						return 0, &flowStressErr{flowRunOf(ctx).id, "stream node"}
					}
					return flowStreamStep(ctx, prev)
				}, PolicyFail, StreamRetry(RetryPolicy{Attempts: 2, Backoff: ConstantBackoff(30 * time.Microsecond)})), "retried"}
			default:
				h = flowStreamHandle{fr.stream.Append(flowStreamStep), "ok"}
			}
			fr.handles <- h
			flowNap(ctx, 100*time.Microsecond)
		}
		if n <= fr.prodFails && n < 2 {
			return 0, &flowStressErr{fr.id, "prod"} // retried
		}
		// Its last attempt: the stream ends after what it appended.
		fr.handles <- flowStreamHandle{fr.stream.AppendWith(func(context.Context, int) (int, error) {
			return 0, errFlowStreamDone
		}, PolicyEnd), "last"}
		if n <= fr.prodFails {
			return 0, &flowStressErr{fr.id, "prod"}
		}
		return fr.id*1000 + 7, nil
	}), 0).Retry(RetryPolicy{Attempts: 2})
	drain := NewWrapper("drain", WorkerFunc[int, int](func(ctx context.Context, _ int, _ Wrappers) (int, error) {
		fr := flowRunOf(ctx)
		err := fr.stream.Run(ctx)
		if se := (*StreamEndError)(nil); errors.As(err, &se) && se.Err == errFlowStreamDone {
			return fr.id*1000 + 8, nil
		}
		return 0, err
	}), 0).ShortCircuit(false) // skipped, it would leave the stream's nodes, and reader, waiting for ever
	reader := NewWrapper("reader", WorkerFunc[int, int](readFlowStream), 0).Depend(src, true)
	each := NewWrapper("each", Worker[int, []WorkResult[int]](ForEach[int, int, int]{
		Items: func(ctx context.Context, _ int, _ Wrappers) ([]int, error) {
			id := flowRunOf(ctx).id
			return []int{id*1000 + 40, id*1000 + 41, id*1000 + 42, id*1000 + 43}, nil
		},
		Worker: WorkerFunc[int, int](func(ctx context.Context, item int, _ Wrappers) (int, error) {
			fr := flowRunOf(ctx)
			flowNap(ctx, 700*time.Microsecond)
			if fr.itemFails&(1<<(item%1000-40)) != 0 {
				return 0, &flowStressErr{fr.id, "item"}
			}
			return item, nil
		}),
		Node: func(i int, _ int, n *WorkerWrapper[int, int]) {
			if i%2 == 1 {
				n.OnFailure(PolicyContinue)
			}
		},
		Join:   fp.pickEachJoin(rng),
		Limit:  2,
		Budget: time.Millisecond,
	}), 0).Depend(src, true)

	ups := []Wrapper{flaky, timed, susp, afterSusp, reader, drain, each}
	subset := func(min int) []Wrapper {
		s := slices.Clone(ups)
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		return s[:min+rng.IntN(len(s)-min+1)]
	}
	joined := map[string]*WorkerWrapper[int, int]{}
	link := func(id string, tag int, j Join, from []Wrapper) {
		n := NewWrapper(id, tagged(tag), 0)
		for _, u := range from {
			n.Depend(u, rng.IntN(2) == 0) // the flag is ignored by these joins
		}
		fp.joins[id] = j
		joined[id] = n.Join(j)
	}
	makers := []func(){
		func() { link("jAny", 10, AnySucceeded(), subset(1)) },
		func() {
			from := subset(2)
			fp.atLeast = 1 + rng.IntN(len(from))
			link("jAtLeast", 11, AtLeast(fp.atLeast), from)
		},
		func() {
			from := subset(2)
			for _, u := range from[:1+rng.IntN(2)] {
				fp.named = append(fp.named, u.core().id)
			}
			link("jNamed", 12, NamedSucceeded(fp.named...), from)
		},
		func() {
			from := subset(2)
			fp.custom = 1 + rng.IntN(len(from))
			fp.customSuspends = rng.IntN(2) == 0
			need, suspends := fp.custom, fp.customSuspends
			link("jCustom", 13, CustomJoin(func(us []Upstream) Decision {
				checkFlowUpstreams(us)
				var ok, live int
				for _, u := range us {
					switch {
					case u.OK:
						ok++
					case !u.Ended:
						live++
					}
				}
				switch {
				case ok >= need:
					return DecideRun
				case ok+live < need && suspends:
					return DecideSuspend
				case ok+live < need:
					return DecideFail
				}
				return DecideWait
			}), from)
		},
		func() { link("jAllDone", 14, AllDone(), append(subset(1), ender)) },
	}
	rng.Shuffle(len(makers), func(i, j int) { makers[i], makers[j] = makers[j], makers[i] })
	for _, m := range makers {
		m()
	}
	for _, n := range []*WorkerWrapper[int, int]{src, flaky, timed, susp, afterSusp, ender, prod, drain, reader, joined["jAny"],
		joined["jAtLeast"], joined["jNamed"], joined["jCustom"], joined["jAllDone"]} {
		n.Callback(ResultFunc[int, int](func(bool, int, WorkResult[int]) { calls[n.ID()].Add(1) }))
	}
	each.Callback(ResultFunc[int, []WorkResult[int]](func(bool, int, WorkResult[[]WorkResult[int]]) { calls["each"].Add(1) }))
	starts := []Wrapper{src, prod, drain}
	rng.Shuffle(len(starts), func(i, j int) { starts[i], starts[j] = starts[j], starts[i] })
	pl, err := Compile(starts...)
	if err != nil {
		t.Fatal(err)
	}
	fp.pl = pl
	return fp
}

// pickEachJoin picks the ForEach's Join, and the successes it needs.
func (fp *flowStressPlan) pickEachJoin(rng *rand.Rand) Join {
	switch rng.IntN(3) {
	case 0:
		fp.eachJoin, fp.eachN = AnySucceeded(), 1
	case 1:
		fp.eachJoin, fp.eachN = AtLeast(2), 2
	}
	return fp.eachJoin
}

// checkFlowUpstreams checks that the values a custom join sees are of
// one run: the runs of a plan share the join's fn.
func checkFlowUpstreams(us []Upstream) {
	id := -1
	for _, u := range us {
		if u.Result != ResultSuccess {
			continue
		}
		v, ok := u.Value.(int)
		if !ok {
			continue // each's []WorkResult[int]
		}
		if id >= 0 && v/1000 != id {
			panic(fmt.Sprintf("a custom join sees values of runs %d and %d", id, v/1000))
		}
		id = v / 1000
	}
}

// flowStreamStep is a stream node's work: the next value of its run's
// count, after a check that prev is of the same run.
func flowStreamStep(ctx context.Context, prev int) (int, error) {
	fr := flowRunOf(ctx)
	if prev/1000 != fr.id {
		fr.bad.add("run %d: a stream node receives %d, of run %d", fr.id, prev, prev/1000)
	}
	return prev + 1, nil
}

// readFlowStream is reader's work: it reads the run's stream nodes in the
// order they were appended, as prod appends them, and checks what
// [Stream] says of them: each node that succeeded received the result
// of the last node before it that succeeded (the stream's initial value,
// id*1000, for the first), so the values are id*1000+1, +2, ... in
// order; a node under PolicyContinue that failed leaves prev as it was;
// a node that did not run because the stream stopped ends with an error
// wrapping ErrStreamStopped, and so do all nodes after it (the stream is
// append-only, its stop final); a retried node that succeeded took two
// attempts (StreamNode.Attempts).
func readFlowStream(ctx context.Context, _ int, _ Wrappers) (int, error) {
	fr := flowRunOf(ctx)
	next, stopped := fr.id*1000+1, false
	for {
		var h flowStreamHandle
		select {
		case h = <-fr.handles:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		select {
		case <-h.n.Done():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		v, err := h.n.Wait()
		switch {
		case errors.Is(err, ErrStreamStopped):
			stopped = true
		case stopped:
			fr.bad.add("run %d: a %s stream node ended with %d, %v after a node the stream's stop ended", fr.id, h.kind, v, err)
		case h.kind == "last":
			if err != errFlowStreamDone {
				fr.bad.add("run %d: the last stream node ended with %d, %v", fr.id, v, err)
			}
		case h.kind == "bad":
			var fe *flowStressErr
			if !errors.As(err, &fe) || fe.id != fr.id {
				fr.bad.add("run %d: a failing stream node ended with %d, %v", fr.id, v, err)
			}
		case err != nil:
			// A node whose attempt the stream's stop ended (its retry
			// not made) wraps the cause, and stops those after it; so
			// does a retried node whose retry would start past the
			// deadline ("the failure policy applies at once instead").
			var fe *flowStressErr
			late := h.kind == "retried" && fr.shortLived && errors.As(err, &fe) && fe.id == fr.id
			if !late && ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				fr.bad.add("run %d: a %s stream node ended with %v", fr.id, h.kind, err)
			}
			stopped = true
		case v != next:
			fr.bad.add("run %d: a %s stream node ended with %d, want %d", fr.id, h.kind, v, next)
		case h.kind == "retried" && h.n.Attempts() != 2:
			fr.bad.add("run %d: a retried stream node succeeded after %d attempts", fr.id, h.n.Attempts())
		default:
			next++
		}
		if h.kind == "last" {
			fr.mu.Lock()
			fr.streamed = next - fr.id*1000 - 1
			fr.mu.Unlock()
			return fr.id*1000 + 9, nil
		}
	}
}

// errFlowFailWith is the error Resume's FailWith gives susp.
var errFlowFailWith = errors.New("failed by the resumer")

// flowCounts reports whether node n of a finished run's report counts as
// a success for its dependants' joins, as [Upstream] says (OK: "it
// succeeded, or failed under PolicyContinue"): PolicyContinue applies to
// the node's own failure, its worker's error (an AttemptTimeout's
// included) and its own Timeout, and to nothing else (see FailurePolicy).
func flowCounts(fp *flowStressPlan, n *NodeReport) bool {
	if n.Status == StatusSucceeded {
		return true
	}
	if fp.policy[n.ID] != PolicyContinue {
		return false
	}
	var fe *flowStressErr
	var ate *AttemptTimeoutError
	var nte *NodeTimeoutError
	switch n.Status {
	case StatusFailed:
		return errors.As(n.Err, &fe) && n.Err == error(fe) || errors.As(n.Err, &ate) && n.Err == error(ate)
	case StatusTimedOut:
		return errors.As(n.Err, &nte) && nte.ID == n.ID
	}
	return false
}

// flowEnderEnded reports whether node e, ender, ended the run under
// PolicyEnd, which applies to its worker's failure and to its own
// Timeout (see FailurePolicy).
func flowEnderEnded(fp *flowStressPlan, e *NodeReport) bool {
	var fe *flowStressErr
	var nte *NodeTimeoutError
	switch e.Status {
	case StatusFailed:
		return errors.As(e.Err, &fe) && e.Err == error(fe)
	case StatusTimedOut:
		return fp.enderTimeout > 0 && errors.As(e.Err, &nte) && e.Err == error(nte)
	}
	return false
}

// flowEnded reports whether a report shows node n ended.
func flowEnded(n *NodeReport) bool {
	switch n.Status {
	case StatusSucceeded, StatusFailed, StatusSkipped, StatusTimedOut:
		return true
	}
	return false
}

// flowStressStats counts what the checked runs did, to show in the log
// that the checks had something to check.
type flowStressStats struct {
	statuses  sync.Map // "node status" → *atomic.Int64
	resumed   [4]atomic.Int64
	streamed  atomic.Int64 // stream nodes reader saw succeed
	endedByPE atomic.Int64 // runs PolicyEnd ended
}

func (st *flowStressStats) count(key string) {
	c, _ := st.statuses.LoadOrStore(key, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

func (st *flowStressStats) String() string {
	var keys []string
	st.statuses.Range(func(k, _ any) bool {
		keys = append(keys, k.(string))
		return true
	})
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		c, _ := st.statuses.Load(k)
		fmt.Fprintf(&b, "%s %d; ", k, c.(*atomic.Int64).Load())
	}
	fmt.Fprintf(&b, "resumed: rerun %d, succeed %d, fail %d; stream nodes read %d; runs ended by PolicyEnd %d",
		st.resumed[resumeRerun].Load(), st.resumed[resumeSucceed].Load(), st.resumed[resumeFail].Load(), st.streamed.Load(), st.endedByPE.Load())
	return b.String()
}

// flowRunMode says how a run of the test ends.
type flowRunMode int

const (
	flowClean     flowRunMode = iota // it goes on until its nodes have ended
	flowReadAlong                    // so, and its report is read as it goes
	flowCancelled                    // Cancel at a random point
	flowReleased                     // Release at a random point, maybe before Wait returns
	flowShort                        // a group deadline of a few milliseconds
)

// checkFlowNode checks that a node that has ended shows a Status, Reason
// and error that agree, as Status, NodeReport.Reason and the errors'
// docs say: succeeded is ResultSuccess without an error or a reason;
// timed out is ResultTimeout and "stopped ..." (by the node's own
// Timeout, a *NodeTimeoutError naming it, or by the run's Cancel or
// deadline, whose cause it carries); skipped is ErrSkipped, "no
// successor needed it any more"; failed is ResultException and one of:
// the worker's own error ("worker failed", an AttemptTimeout's
// "attempt N passed its attempt timeout"), PolicyEnd's *EndError ("stopped:
// node "ender" ended the run"), a must upstream's *UpstreamError ("must
// upstream X failed", X an upstream that did not count), a join that
// cannot be met, a custom join's DecideFail, or Resume's FailWith
// ("failed by Resume"). Every error of a worker is its own run's.
func checkFlowNode(fr *flowStressRun, fp *flowStressPlan, mode flowRunMode, rep *Report, byID map[string]*NodeReport, n *NodeReport, final bool, why string) {
	id, bad := fr.id, fr.bad
	say := func(format string, args ...any) {
		bad.add("run %d (%s, mode %d): %s: %s: status %v, result %v, state %v, err %v, reason %q",
			id, why, mode, n.ID, fmt.Sprintf(format, args...), n.Status, n.Result, n.State, n.Err, n.Reason)
	}
	var fe *flowStressErr
	if errors.As(n.Err, &fe) && fe.id != id {
		say("an error of run %d", fe.id)
	}
	switch n.Status {
	case StatusSucceeded:
		if n.Result != ResultSuccess || n.Err != nil || n.Reason != "" || n.State != StateFinish {
			say("succeeded, not as a success")
		}
		checkStressValue(fr.id, fr.bad, n.ID, n.Value)
		if n.ID == "each" {
			checkStressReportFlow(fr, rep.Nodes[n.Index].Sub)
		}
		return
	case StatusSkipped:
		if n.Result != ResultException || n.Err != ErrSkipped || n.Reason != "no successor needed it any more" || n.Ran {
			say("skipped, not as a node short-circuited")
		}
		return
	case StatusTimedOut:
		if n.Result != ResultTimeout || n.State != StateError || !strings.HasPrefix(n.Reason, "stopped ") {
			say("timed out, not as a timeout")
		}
		var nte *NodeTimeoutError
		switch {
		case errors.As(n.Err, &nte):
			own := map[string]time.Duration{"timed": 900 * time.Microsecond, "ender": fp.enderTimeout}[n.ID]
			if own == 0 || nte.ID != n.ID || nte.Timeout != own ||
				!strings.HasPrefix(n.Reason, "stopped while running") && !strings.HasPrefix(n.Reason, "stopped while waiting to retry") &&
					!(n.Attempts == 0 && strings.HasPrefix(n.Reason, "stopped before it started")) {
				say("not its own Timeout")
			}
		case errors.Is(n.Err, context.Canceled):
			if mode != flowCancelled && mode != flowReleased {
				say("cancelled, though nothing cancelled its run")
			}
		case errors.Is(n.Err, context.DeadlineExceeded):
			if mode != flowShort {
				say("the run's deadline, though it had none soon")
			}
		default:
			say("timed out with another error")
		}
		return
	case StatusFailed:
	default:
		say("not ended")
		return
	}
	if n.Result != ResultException || n.State != StateError || n.Err == nil {
		say("failed, not as a failure")
	}
	var ee *EndError
	var up *UpstreamError
	var ate *AttemptTimeoutError
	switch {
	case errors.As(n.Err, &ee) && n.Err == error(ee):
		if ee.ID != "ender" || n.Reason != `stopped: node "ender" ended the run` {
			say("an EndError not of ender")
		}
		// A snapshot may show ender, read before n, still running.
		if e := byID["ender"]; (final || flowEnded(e)) && !flowEnderEnded(fp, e) {
			say("an EndError, though ender did not fail")
		}
	case n.Reason == "failed by Resume":
		if n.ID != "susp" && n.ID != "jCustom" || !errors.Is(n.Err, errFlowFailWith) {
			say("failed by Resume, not with the resumer's error")
		}
	case errors.As(n.Err, &up) && n.Err == error(up):
		u := byID[up.ID]
		if u == nil || !slices.Contains(n.Deps, u.Index) || flowEnded(u) && u.Status == StatusSucceeded {
			say("an UpstreamError of %q, no upstream of it that failed", up.ID)
		}
		if !strings.Contains(n.Reason, strconv.Quote(up.ID)) {
			say("a reason that does not name %q", up.ID)
		}
	case errors.As(n.Err, &ate) && n.Err == error(ate):
		if n.ID != "timed" || ate.ID != "timed" || ate.Attempt != n.Attempts ||
			n.Reason != fmt.Sprintf("attempt %d passed its attempt timeout of %v", ate.Attempt, ate.Timeout) {
			say("an AttemptTimeoutError not of its last attempt")
		}
	case errors.As(n.Err, &fe) && n.Err == error(fe):
		// drain returns the stream's error: a retried stream node's,
		// whose retry the deadline refused.
		drained := n.ID == "drain" && fe.what == "stream node" && mode == flowShort
		if n.Reason != "worker failed" || fe.what != n.ID && n.ID != "each" && !drained {
			say("its worker's failure, not so reported")
		}
	case errors.Is(n.Err, ErrJoinFailed):
		if n.ID != "jCustom" || fp.customSuspends || n.Reason != "custom join decided to fail" || n.Ran {
			say("a custom join's failure")
		}
	case strings.Contains(n.Err.Error(), "cannot be met"):
		if n.ID != "jAny" && n.ID != "jAtLeast" || n.Ran {
			say("a join that cannot be met")
		}
	default:
		if n.ID != "each" { // its Join's failure, or an item's
			say("a failure the test does not explain")
		}
	}
}

// checkStressReportFlow checks the values of a sub-run's report.
func checkStressReportFlow(fr *flowStressRun, rep *Report) {
	if rep == nil {
		return
	}
	for _, n := range rep.Nodes {
		if n.Result == ResultSuccess {
			checkStressValue(fr.id, fr.bad, "each/"+n.ID, n.Value)
		}
	}
}

// checkFlowJoin checks join node j's decision in a report of a run that
// has ended, against its upstreams' outcomes, as its join's doc says:
// AnySucceeded "runs the node on the first upstream that succeeds, and
// fails it only once every upstream failed"; AtLeast(n) "runs the node on
// the n-th upstream success and fails it as soon as n successes have
// become impossible"; NamedSucceeded "runs the node once the upstreams
// with the given ids succeeded, and fails it as soon as one of them
// fails"; AllDone "runs the node once every upstream has ended ... It
// never fails the node"; a CustomJoin as its fn decides (here: run on
// fp.custom upstreams OK, fail once that is impossible). A success counts
// as Upstream.OK says (see flowCounts), and what counted once does for
// good, so the final report shows at least the successes the decision
// saw, and no more than a failure's.
func checkFlowJoin(fr *flowStressRun, fp *flowStressPlan, rep *Report, j *NodeReport, why string) {
	var ok, failed int
	okByID := map[string]bool{}
	for _, d := range j.Deps {
		u := &rep.Nodes[d]
		switch {
		case flowCounts(fp, u):
			ok++
			okByID[u.ID] = true
		case flowEnded(u):
			failed++
		}
	}
	total := len(j.Deps)
	ran := j.Ran || j.Status == StatusSucceeded
	var ee *EndError
	joinFailed := j.Status == StatusFailed && !(errors.As(j.Err, &ee) && j.Err == error(ee)) && j.Reason != "failed by Resume"
	fr.mu.Lock()
	resumed := len(fr.resumed[j.ID]) > 0 // a Rerun runs it, whatever its join said
	fr.mu.Unlock()
	say := func(what string) {
		fr.bad.add("run %d (%s): %s (%s) %s, with %d of %d upstreams OK, %d failed: %v %v %q\n%v",
			fr.id, why, j.ID, j.Join, what, ok, total, failed, j.Status, j.Err, j.Reason, rep)
	}
	switch j.ID {
	case "jAny":
		if ran && ok == 0 {
			say("ran")
		}
		if joinFailed && (ok > 0 || failed != total) {
			say("failed")
		}
	case "jAtLeast":
		if ran && ok < fp.atLeast {
			say("ran")
		}
		if joinFailed && (ok >= fp.atLeast || failed < total-fp.atLeast+1) {
			say("failed")
		}
	case "jCustom":
		if ran && ok < fp.custom && !resumed {
			say("ran")
		}
		if joinFailed && ok >= fp.custom {
			say("failed")
		}
	case "jNamed":
		all, one := true, false
		for _, id := range fp.named {
			u := rep.Nodes[slices.IndexFunc(rep.Nodes, func(n NodeReport) bool { return n.ID == id })]
			all = all && okByID[id]
			one = one || flowEnded(&u) && !okByID[id]
		}
		if ran && !all {
			say("ran")
		}
		if joinFailed && !one {
			say("failed")
		}
	case "jAllDone":
		if ran && failed+ok != total {
			// Every upstream ended; ok+failed counts those that did.
			say("ran before every upstream ended")
		}
		if joinFailed {
			say("failed")
		}
	}
}

// checkFlowRun checks the report of run fr once it has ended, and the
// error its Wait returned: every node has ended (checkFlowNode), the
// joins as checkFlowJoin says, and each node's own rules as their docs
// say: flaky "tries again" up to its Attempts and only then fails
// (RetryPolicy); afterSusp, which needs susp, received susp's value,
// its worker's or SucceedWith's; susp ends as the last Resume accepted
// said (SucceedWith "ends the pending node successfully with value v",
// FailWith "ends the pending node with err"), and is never pending
// without failing twice; each, a ForEach whose Join counts successes,
// succeeded only with as many items OK (an item under PolicyContinue
// counts when it failed, or its Budget stopped it); Wait returns nil
// when nothing stopped the run, or PolicyEnd's *EndError when ender
// failed ("BeginWork returns that error, naming the node").
func checkFlowRun(fr *flowStressRun, fp *flowStressPlan, mode flowRunMode, rep *Report, waitErr error, st *flowStressStats) {
	for _, n := range rep.Nodes {
		if !strings.HasPrefix(n.ID, "j") && n.ID != "timed" && n.ID != "each" && n.ID != "susp" {
			continue
		}
		st.count(n.ID + " " + n.Status.String())
	}
	fr.mu.Lock()
	for _, ks := range fr.resumed {
		for _, k := range ks {
			st.resumed[k].Add(1)
		}
	}
	st.streamed.Add(int64(fr.streamed))
	fr.mu.Unlock()
	byID := map[string]*NodeReport{}
	for k := range rep.Nodes {
		byID[rep.Nodes[k].ID] = &rep.Nodes[k]
	}
	why := "report"
	for k := range rep.Nodes {
		checkFlowNode(fr, fp, mode, rep, byID, &rep.Nodes[k], true, why)
	}
	for _, id := range flowJoinIDs {
		checkFlowJoin(fr, fp, rep, byID[id], why)
	}
	id, bad := fr.id, fr.bad
	stopped := mode == flowCancelled || mode == flowShort
	if f := byID["flaky"]; f.Attempts > 3 || f.Status == StatusSucceeded && int32(f.Attempts) != fr.flakyFails+1 ||
		!stopped && f.Status == StatusFailed && f.Reason == "worker failed" && f.Attempts != 3 {
		bad.add("run %d: flaky, failing %d times, %v after %d attempts: %v", id, fr.flakyFails, f.Status, f.Attempts, f.Err)
	}
	if n := byID["timed"]; n.Attempts > 3 {
		bad.add("run %d: timed made %d attempts", id, n.Attempts)
	}
	s, as := byID["susp"], byID["afterSusp"]
	fr.mu.Lock()
	resumed, resumedJoin := slices.Clone(fr.resumed["susp"]), slices.Clone(fr.resumed["jCustom"])
	fr.mu.Unlock()
	if as.Status == StatusSucceeded && (s.Status != StatusSucceeded || as.Value != s.Value.(int)+100) {
		bad.add("run %d: afterSusp has %v, susp %v %v", id, as.Value, s.Status, s.Value)
	}
	if s.Status == StatusSucceeded && s.Value != id*1000+4 && s.Value != id*1000+5 {
		bad.add("run %d: susp has %v", id, s.Value)
	}
	if len(resumed) > 0 {
		switch last := resumed[len(resumed)-1]; {
		case last == resumeSucceed && (s.Status != StatusSucceeded || s.Value != id*1000+5):
			bad.add("run %d: susp, resumed with SucceedWith, %v %v", id, s.Status, s.Value)
		case last == resumeFail && (s.Status != StatusFailed || s.Reason != "failed by Resume"):
			bad.add("run %d: susp, resumed with FailWith, %v %v", id, s.Status, s.Err)
		}
	}
	c := byID["jCustom"]
	if len(resumedJoin) > 0 {
		switch last := resumedJoin[len(resumedJoin)-1]; {
		case !fp.customSuspends:
			bad.add("run %d: jCustom, whose join does not suspend it, was resumed", id)
		case last == resumeSucceed && (c.Status != StatusSucceeded || c.Value != id*1000+15):
			bad.add("run %d: jCustom, resumed with SucceedWith, %v %v", id, c.Status, c.Value)
		case last == resumeFail && (c.Status != StatusFailed || c.Reason != "failed by Resume"):
			bad.add("run %d: jCustom, resumed with FailWith, %v %v", id, c.Status, c.Err)
		}
	}
	if fr.suspFails < 2 && len(resumed) > 0 && !fr.shortLived {
		// Its retry is refused only past its run's deadline.
		bad.add("run %d (mode %d): susp, failing %d times, was resumed", id, mode, fr.suspFails)
	}
	if e := byID["each"]; e.Status == StatusSucceeded && fp.eachN > 0 {
		items, _ := e.Value.([]WorkResult[int])
		var ok int
		for k, it := range items {
			var fe *flowStressErr
			var be *BudgetError
			if it.State == ResultSuccess || k%2 == 1 && (errors.As(it.Err, &fe) || errors.As(it.Err, &be)) {
				ok++
			}
		}
		if ok < fp.eachN {
			bad.add("run %d: each (%v) succeeded with %d items OK: %v", id, fp.eachJoin, ok, items)
		}
	}
	var ee *EndError
	ender := byID["ender"]
	endedByEnder := flowEnderEnded(fp, ender)
	if endedByEnder {
		st.endedByPE.Add(1)
	}
	switch {
	case endedByEnder && !stopped:
		if !errors.As(waitErr, &ee) || ee.ID != "ender" {
			bad.add("run %d: ender failed under PolicyEnd, Wait returned %v", id, waitErr)
		}
	case !stopped && waitErr != nil:
		bad.add("run %d: nothing stopped the run, Wait returned %v\n%v", id, waitErr, rep)
	}
	if !stopped && (fr.endFails || fp.enderTimeout == 0) && endedByEnder != fr.endFails {
		bad.add("run %d: ender, to fail %v, %v: %v", id, fr.endFails, ender.Status, ender.Err)
	}
}

// resumeFlowRun resumes susp each time it becomes pending, after a nap,
// as Rerun, SucceedWith or FailWith at random, while the run goes on,
// until the run is done. It records the resumptions Resume accepted.
func resumeFlowRun(fr *flowStressRun, r *Run, released *atomic.Bool) {
	var id string
	for {
		select {
		case id = <-fr.pending:
		case <-r.Done():
			return
		}
		flowNap(context.Background(), 300*time.Microsecond)
		kinds := []int{resumeRerun, resumeSucceed, resumeFail}
		k := kinds[rand.IntN(len(kinds))]
		how := Rerun()
		switch k {
		case resumeSucceed:
			how = SucceedWith(fr.id*1000 + 5) // susp's; jCustom's is 15
			if id == "jCustom" {
				how = SucceedWith(fr.id*1000 + 15)
			}
		case resumeFail:
			how = FailWith(errFlowFailWith)
		}
		err := r.Resume(id, how)
		switch {
		case err == nil:
			fr.mu.Lock()
			fr.resumed[id] = append(fr.resumed[id], k)
			fr.mu.Unlock()
		case !errors.Is(err, ErrNotPending) && !released.Load():
			fr.bad.add("run %d: Resume: %v", fr.id, err)
		}
	}
}

// TestConcurrentRunsKeepFlowRules runs compiled plans (pooled run
// states) from several goroutines at once, on two Asyncs, each run with
// its own id carried by its context, mixing the flow rules: retries with
// an exponential backoff; a node's own Timeout racing its retries, its
// AttemptTimeout and the group deadline; PolicyContinue; PolicyEnd, on
// a failure or the node's own Timeout; a node retried, then suspended
// (PolicySuspend), and in some plans a custom join that suspends its
// node (DecideSuspend), resumed from another goroutine (Rerun,
// SucceedWith, FailWith) while the run goes on; a
// stream that one node appends to (failing and retried), another runs
// and a third reads as it grows; a ForEach with a Limit and a Budget;
// the joins AnySucceeded, AtLeast, NamedSucceeded, CustomJoin and
// AllDone over random upstreams, their edges declared in random orders;
// runs cancelled, released (sometimes before Wait returns), given a short
// deadline, or read as they go, at random. Every run must end (Wait
// returns); each node must end once (one Result callback, one OnNodeEnd,
// and one OnNodeTimeout for each node whose report says it timed out),
// with a Status, Reason and error that agree (a Reason that does not
// change once the node has ended); each join must decide as
// its upstreams' outcomes say; susp's value, resumed or not, must reach
// afterSusp; the stream's reader must see its values in order, append-only,
// stopped for good once stopped; every value must be its own run's; and
// the report OnRunEnd gets must be the one Report gives after Wait; and
// the first stop of each (sub-)run (its deadline, a Cancel, ender's
// PolicyEnd, each's Budget) must be the one every node it ended carries,
// and its error's (checkOneStop). ender's failure is settled a while
// after its worker returned in some plans, so that it often meets the
// deadline or a Cancel. ASYNCTOOL_FLOW_STRESS_RUNS sets the runs per goroutine (15).
func TestConcurrentRunsKeepFlowRules(t *testing.T) {
	runs, goroutines := stressRuns(t, "ASYNCTOOL_FLOW_STRESS_RUNS", 15), 6
	calls := resultCounts(flowIDs)
	base := rand.Uint64()
	var plans []*flowStressPlan
	for k := range 4 {
		plans = append(plans, buildFlowStressPlan(t, base+uint64(k), calls))
	}
	bad := &planStressBad{}
	hooks := &Hooks{
		OnRunStart: func(ctx context.Context, info RunInfo) context.Context {
			fr := flowRunOf(ctx)
			hr := &flowStressHookRun{planStressHookRun: *newStressHookRun(fr.id, info), timeouts: map[int]int{}}
			fr.mu.Lock()
			fr.hooks = append(fr.hooks, hr)
			fr.mu.Unlock()
			return context.WithValue(ctx, flowStressHookKey{}, hr)
		},
		OnNodeEnd: func(ctx context.Context, ev NodeEvent) {
			hr := ctx.Value(flowStressHookKey{}).(*flowStressHookRun)
			hr.nodeEnded(ev.Index)
		},
		OnNodeTimeout: func(ctx context.Context, ev NodeEvent) {
			hr := ctx.Value(flowStressHookKey{}).(*flowStressHookRun)
			hr.mu.Lock()
			hr.timeouts[ev.Index]++
			hr.mu.Unlock()
		},
		OnNodePending: func(ctx context.Context, ev NodeEvent) {
			if ev.ID != "susp" && ev.ID != "jCustom" {
				bad.add("OnNodePending of %s", ev.ID)
			}
			select {
			case flowRunOf(ctx).pending <- ev.ID:
			default:
			}
		},
		OnRunEnd: func(ctx context.Context, rep *Report) {
			hr := ctx.Value(flowStressHookKey{}).(*flowStressHookRun)
			hr.mu.Lock()
			hr.endRep = rep
			hr.mu.Unlock()
			hr.runEnded()
		},
	}
	// drain, reader and each wait in their workers for other nodes of
	// their run: with a goroutine per worker at most, the pools must
	// hold three per run at once, or the runs would starve them.
	asyncs := []*Async{New(WithMaxWorkers(32)), New(WithMaxWorkers(4*goroutines), WithTimings(true))}
	type done struct {
		fr   *flowStressRun
		mode flowRunMode
		rep  *Report // after Wait, unless released
	}
	dones := make(chan done, runs*goroutines)
	stats := &flowStressStats{}
	var nextID atomic.Int64
	var modes [5]atomic.Int64
	one := func() {
		fr := &flowStressRun{
			id:         int(nextID.Add(1)),
			bad:        bad,
			flakyFails: rand.Int32N(4),
			timedFails: rand.IntN(3) == 0,
			suspFails:  rand.Int32N(4),
			endFails:   rand.IntN(6) == 0,
			prodFails:  rand.Int32N(3),
			itemFails:  uint8(rand.IntN(16)),
			handles:    make(chan flowStreamHandle, 16),
			pending:    make(chan string, 8),
			resumed:    map[string][]int{},
		}
		fr.stream = NewStream(fr.id * 1000)
		fp := plans[rand.IntN(len(plans))]
		mode := flowRunMode(rand.IntN(5))
		modes[mode].Add(1)
		timeout := time.Minute
		if mode == flowShort {
			fr.shortLived = true
			timeout = time.Duration(500+rand.IntN(3500)) * time.Microsecond
		}
		ctx := WithRunHooks(context.WithValue(context.Background(), flowStressKey{}, fr), hooks)
		r, err := asyncs[rand.IntN(len(asyncs))].StartPlan(ctx, fp.pl, timeout)
		if err != nil {
			bad.add("run %d: StartPlan: %v", fr.id, err)
			return
		}
		var released atomic.Bool
		var side sync.WaitGroup
		side.Go(func() { resumeFlowRun(fr, r, &released) })
		switch mode {
		case flowCancelled:
			side.Go(func() {
				flowNap(context.Background(), 3*time.Millisecond)
				r.Cancel()
			})
		case flowReleased:
			side.Go(func() {
				flowNap(context.Background(), 3*time.Millisecond)
				released.Store(true)
				r.Release()
			})
		case flowReadAlong:
			side.Go(func() {
				for {
					rep := r.Report()
					byID := map[string]*NodeReport{}
					for k := range rep.Nodes {
						byID[rep.Nodes[k].ID] = &rep.Nodes[k]
					}
					for k := range rep.Nodes {
						if n := &rep.Nodes[k]; flowEnded(n) {
							checkFlowNode(fr, fp, mode, rep, byID, n, false, "report read as it goes")
						}
					}
					select {
					case <-r.Done():
						return
					default:
						runtime.Gosched()
					}
				}
			})
		}
		hung, err := waitStressRun(r, fr.id, bad)
		if hung {
			r.Cancel()
			side.Wait()
			return
		}
		side.Wait()
		d := done{fr: fr, mode: mode}
		if mode != flowReleased {
			d.rep = r.Report()
			checkFlowRun(fr, fp, mode, d.rep, err, stats)
			for _, m := range checkOneStop(d.rep, err, fmt.Sprintf("run %d (mode %d)", fr.id, mode)) {
				bad.add("%s", m)
			}
		}
		r.Release()
		dones <- d
	}
	runStressFrom(t, goroutines, runs, one)
	for _, a := range asyncs {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	}
	// Close has waited for every worker and hook, late ones included.
	close(dones)
	var hooked int
	for d := range dones {
		var top *flowStressHookRun
		for _, hr := range d.fr.hooks {
			hooked++
			hr.check(t)
			for i, n := range hr.timeouts {
				if n != 1 {
					t.Errorf("run %d (nested %v): OnNodeTimeout fired %d times for node %d", d.fr.id, hr.nested, n, i)
				}
			}
			if !hr.nested {
				top = hr
			}
		}
		if d.rep == nil {
			continue
		}
		if top == nil {
			t.Errorf("run %d: no OnRunStart", d.fr.id)
			continue
		}
		for i, n := range d.rep.Nodes {
			if (n.Result == ResultTimeout) != (top.timeouts[i] == 1) {
				t.Errorf("run %d: node %s ended with %v, and OnNodeTimeout fired %d times", d.fr.id, n.ID, n.Result, top.timeouts[i])
			}
			// OnRunEnd "is called once every node has ended, with the
			// run's report": what it shows of an ended node is final.
			e := top.endRep.Nodes[i]
			if e.Status != n.Status || e.Result != n.Result || e.Err != n.Err || e.Reason != n.Reason || fmt.Sprint(e.Value) != fmt.Sprint(n.Value) {
				t.Errorf("run %d: node %s is %v %v %v %q in OnRunEnd's report, %v %v %v %q in Report's after Wait",
					d.fr.id, n.ID, e.Status, e.Value, e.Err, e.Reason, n.Status, n.Value, n.Err, n.Reason)
			}
		}
	}
	for _, m := range bad.msgs {
		t.Error(m)
	}
	for _, id := range flowIDs {
		if n := calls[id].Load(); n != nextID.Load() {
			t.Errorf("node %s: %d Result calls in %d runs", id, n, nextID.Load())
		}
	}
	t.Logf("seed %d: %d runs (clean %d, read along %d, cancelled %d, released %d, short %d), %d hooked (sub-)runs",
		base, nextID.Load(), modes[flowClean].Load(), modes[flowReadAlong].Load(), modes[flowCancelled].Load(),
		modes[flowReleased].Load(), modes[flowShort].Load(), hooked)
	t.Logf("checked: %v", stats)
}
