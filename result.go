package asynctool

import "fmt"

// ResultState says how a node's result came about.
//
// The zero value is ResultDefault: the node has not ended.
type ResultState int32

const (
	// ResultDefault: no result yet.
	ResultDefault ResultState = iota
	// ResultSuccess: the worker returned a value and no error.
	ResultSuccess
	// ResultTimeout: the node's own Timeout passed (Err is then a
	// *NodeTimeoutError), or the group deadline passed, or the run's context was
	// cancelled, before the node ended.
	ResultTimeout
	// ResultException: the worker returned an error or panicked, an
	// upstream it needed failed, its join failed it, the node was
	// skipped, or a PolicyEnd node ended the run before it ended.
	ResultException
)

func (s ResultState) String() string {
	switch s {
	case ResultDefault:
		return "default"
	case ResultSuccess:
		return "success"
	case ResultTimeout:
		return "timeout"
	case ResultException:
		return "exception"
	}
	return fmt.Sprintf("ResultState(%d)", int32(s))
}

// WorkResult is a node's outcome. On success Value is what the worker
// returned and Err is nil. Otherwise Value is the node's default value
// (see [WorkerWrapper.Default] and [Defaulter]) and Err says why:
//   - the worker's own error, or a [*PanicError] if it panicked (a
//     worker's own ErrSkipped or ErrNotTaken is wrapped: see [ErrSkipped]);
//   - an [*UpstreamError] wrapping the error of an upstream it needed;
//   - [ErrSkipped] if it was short-circuited;
//   - [ErrNotTaken] if it was a branch not taken ([When], [WhenResult],
//     [DecideSkip]), or an upstream it needed was;
//   - the run context's cause ([context.DeadlineExceeded] for the group
//     deadline) if it timed out, or a [*NodeTimeoutError] if its own
//     [WorkerWrapper.Timeout] passed;
//   - an [*AttemptTimeoutError] if its last attempt passed its
//     [RetryPolicy.AttemptTimeout];
//   - an [*EndError] if a [PolicyEnd] node ended the run first;
//   - an error wrapping [ErrJoinFailed] or [ErrJoinUndecided], or a
//     *PanicError, if its custom join failed it; an error wrapping
//     [ErrResultType], or a *PanicError, if its [When] or [WhenResult]
//     join's condition could not be asked or panicked (an error wrapping
//     [ErrGoexit] if the condition or a custom join called
//     runtime.Goexit);
//   - [ErrGoexit] if its worker ended its goroutine with runtime.Goexit.
type WorkResult[R any] struct {
	Value R
	State ResultState
	Err   error
}

// slot holds one node's result for one run, read only after a final state
// has been loaded. A success is val, written by the goroutine running the
// worker just before its CAS from sWorking to sFinish (one CAS, no
// sEnding); a failure is res, written by the goroutine that moved the node
// into sEnding, before it stores sError. A worker whose CAS lost to a
// failure wrote only val, which nobody reads then.
type slot[R any] struct {
	val R
	res WorkResult[R]
}

// get returns the result of a node whose final state is st.
func (s *slot[R]) get(st int32) WorkResult[R] {
	if st == sFinish {
		return WorkResult[R]{Value: s.val, State: ResultSuccess}
	}
	return s.res
}
