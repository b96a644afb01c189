package asynctool

import "fmt"

// State is a node's lifecycle state within a run. A node moves
// Init → Working → Finish or Error, or straight from Init to Error when it
// is fast-failed (an upstream failed, it was skipped, or the group deadline
// passed before it started). Finish and Error are final. A suspended
// (pending) node reports StateWorking; [NodeReport.Status] tells them
// apart.
//
// The zero value is StateInit: a node that has not started.
type State int32

const (
	// StateInit: not started (possibly triggered and waiting for a goroutine).
	StateInit State = iota
	// StateWorking: the worker's Action is running, or about to: the
	// goroutine that readied the node took it to run next.
	StateWorking
	// StateFinish: the worker returned without error in time.
	StateFinish
	// StateError: the node failed, was skipped, or timed out.
	StateError
)

// String returns the state's name: "init", "working", "finish" or "error"
// (State(n) for any other value).
func (s State) String() string {
	switch s {
	case StateInit:
		return "init"
	case StateWorking:
		return "working"
	case StateFinish:
		return "finish"
	case StateError:
		return "error"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Internal states. The public four share their values; the two extra
// states are reported as their public neighbours (see publicState).
const (
	sInit    = int32(StateInit)
	sWorking = int32(StateWorking)
	sFinish  = int32(StateFinish)
	sError   = int32(StateError)
	// sReady: the node's join is satisfied and it waits for a goroutine.
	// Its predecessors are no longer needed by it.
	sReady int32 = 4
	// sEnding: the goroutine that won the CAS into this state is writing
	// the node's result; the final state is stored after it.
	sEnding int32 = 5
	// sPending: suspended (PolicySuspend or a custom join's decision),
	// waiting for Run.Resume or the deadline.
	sPending int32 = 6
)

func publicState(s int32) State {
	switch s {
	case sReady:
		return StateInit
	case sEnding, sPending:
		return StateWorking
	}
	return State(s)
}

func terminal(s int32) bool { return s == sFinish || s == sError }

// A node's state word in a run (rnode.state) packs, besides the state in
// its low bits, what its transitions decided, so that each transition is
// one CAS:
//   - startedBit: the worker was started (set by Ready → Working);
//   - bits countShift to carriedBit: the upstream ends counted toward the
//     node's join while it is in sInit (see arrive), so that the count
//     that satisfies the join and the move out of sInit are one CAS;
//   - carriedBit: the node was claimed (see worklist.claim), and the same
//     bits now hold the ends it carries: nodes whose end was processed
//     but not yet taken off Run.remaining, which whoever processes this
//     node's end takes off with it (see Run.afterCallback);
//   - bits byShift and up: 1 + the upstream whose end decided the node's
//     join (set by the transition out of sInit), 0 if none.
const (
	stateMask  int64 = 7
	startedBit int64 = 8
	countShift       = 4
	// countMax bounds both uses of the count bits: a node has fewer
	// upstreams than maxNodes, and carries fewer ends.
	countMax   int64 = 1<<29 - 1
	carriedBit int64 = 1 << 33
	byShift          = 34
	// maxNodes is the most nodes a graph may have: indexes are int32.
	maxNodes = 1<<27 - 1
)

// st returns node n's state.
func (n *rnode) st() int32 { return int32(n.state.Load() & stateMask) }

// settling reports whether a goroutine holds the node in sEnding and has
// neither published its final state nor marked it failWritten to call
// its worker's DefaultValue: until one of those, which follows in a few
// instructions with no user code between, what its end decided cannot
// be read, and a reader may spin for it (failedMust, waitSwept).
func (n *rnode) settling() bool {
	return n.st() == sEnding && n.failMarks.Load()&failWritten == 0
}

// move changes node n's state from from to to, keeping the word's other
// bits and adding set to them; it reports false if n is not in from.
func (n *rnode) move(from, to int32, set int64) bool {
	for {
		w := n.state.Load()
		if w&stateMask != int64(from) {
			return false
		}
		if n.state.CompareAndSwap(w, w&^stateMask|int64(to)|set) {
			return true
		}
	}
}

// arrive counts one upstream end toward node n's join, which needs need
// of them (0 for a custom join, which decides by itself), and with the one
// that makes need moves n from sInit to the state in to (sReady, or
// sWorking with startedBit for a node the caller claims: see
// worklist.claim, and with carriedBit the ends it carries, which replace
// the count) in the same CAS, recording by as the upstream that decided
// it. It returns the count and whether it moved n; a count of 0
// means n had left sInit, and the end was not counted: nothing reads the
// count then.
func (n *rnode) arrive(need, by int32, to int64) (count int32, moved bool) {
	for {
		w := n.state.Load()
		if w&stateMask != int64(sInit) {
			return 0, false
		}
		nw := w + 1<<countShift // the count has room: see countMax
		c := int32(nw >> countShift & countMax)
		if c == need {
			// The count is read again only with carriedBit, from to.
			nw = w&^(stateMask|countMax<<countShift) | to | byBits(by)
		}
		if n.state.CompareAndSwap(w, nw) {
			return c, c == need
		}
	}
}

// carried returns the ends node n carries (see carriedBit): 0 unless it
// was claimed.
func (n *rnode) carried() int32 {
	w := n.state.Load()
	if w&carriedBit == 0 {
		return 0
	}
	return int32(w >> countShift & countMax)
}

// decidedBy returns the upstream whose end decided node n's join, or -1.
func (n *rnode) decidedBy() int32 { return int32(n.state.Load()>>byShift) - 1 }

// byBits encodes upstream by (or -1 for none) for the state word.
func byBits(by int32) int64 { return int64(by+1) << byShift }
