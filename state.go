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
	// StateWorking: the worker's Action is running.
	StateWorking
	// StateFinish: the worker returned without error in time.
	StateFinish
	// StateError: the node failed, was skipped, or timed out.
	StateError
)

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
