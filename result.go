package asynctool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

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
	// *NodeTimeoutError), or the group deadline passed, or the run's
	// context was cancelled, or the run ended with its EndsRun nodes
	// (Err wraps ErrRunEnded), or, for an item of a ForEach, its Budget
	// ran out (a *BudgetError), before the node ended.
	ResultTimeout
	// ResultException: the worker returned an error, panicked or called
	// runtime.Goexit (an attempt that passed its RetryPolicy's
	// AttemptTimeout fails so too), an upstream it needed failed, its
	// join failed it, the node was skipped or was a branch not taken
	// ([ErrNotTaken]), or a PolicyEnd node ended the run before it
	// ended. [WorkResult]'s Err says which.
	ResultException
)

// String returns the result state's name: "default", "success", "timeout"
// or "exception" (ResultState(n) for any other value).
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
//   - an error wrapping [ErrRunEnded] if the run ended with its
//     [WorkerWrapper.EndsRun] nodes first, or a [*BudgetError] for an
//     item of a [ForEach] that its Budget stopped;
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

// MarshalJSON encodes r as {"Value": ..., "State": ..., "Err": ...}, with
// Err null or a [StoredError]: the error's message, and which of the
// context package's errors ([context.Canceled],
// [context.DeadlineExceeded]) and of this package's sentinel errors
// ([ErrSkipped], [ErrNotTaken], [ErrRunEnded], [ErrJoinFailed],
// [ErrGoexit], ...) it matched with errors.Is. So a result that holds an
// error, such as an item of a [ForEach] that failed or that its Budget
// stopped, can be stored (the durable module checkpoints results as JSON)
// and read back with [WorkResult.UnmarshalJSON]. encoding/json alone
// would encode the error's exported fields, {} for most errors, which
// nothing decodes back into an error.
//
// A struct that embeds a WorkResult gets this method and UnmarshalJSON
// as its own, as one that embeds a time.Time does: it encodes as the
// WorkResult alone, without its other fields. Give the WorkResult a
// field name.
func (r WorkResult[R]) MarshalJSON() ([]byte, error) {
	// Through a pointer, so that Value is addressable: encoding/json
	// calls a MarshalJSON (or MarshalText) with a pointer receiver, such
	// as *big.Int's, only on an addressable value, and would otherwise
	// encode the value's fields, which its UnmarshalJSON does not read
	// back. A result in a slice, as a ForEach's items are, was
	// addressable before WorkResult had this method.
	out := &storedResult[R]{Value: r.Value, State: r.State}
	if r.Err != nil {
		out.Err = storeError(r.Err)
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes what [WorkResult.MarshalJSON] encodes. An error
// comes back as a *[StoredError]: its message is the same and errors.Is
// matches what it matched, but errors.As to the error's own type (a
// [*PanicError], a [*BudgetError]) does not hold, and neither does ==:
// an Err that was [ErrSkipped] itself comes back as a *StoredError that
// matches it, so tell such results with errors.Is. (A message's bytes
// that are not UTF-8 come back as U+FFFD, as encoding/json writes them.)
// JSON null leaves r as it is, as encoding/json leaves a struct.
func (r *WorkResult[R]) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as encoding/json leaves a struct for null
	}
	var in storedResult[R]
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	r.Value, r.State, r.Err = in.Value, in.State, nil
	if in.Err != nil {
		r.Err = in.Err
	}
	return nil
}

// storedResult is a WorkResult as JSON has it, without its methods.
type storedResult[R any] struct {
	Value R
	State ResultState
	Err   *StoredError
}

// StoredError is an error as a [WorkResult] stores it in JSON, and as
// [WorkResult.UnmarshalJSON] gives it back: its message, and in Matches
// the names of the errors it matched (errors.Is) among those a node's
// result can hold, "context.DeadlineExceeded" or "asynctool.ErrSkipped"
// for instance, which its Is method matches again. Text has U+FFFD in
// place of each NUL character of the message: JSON would store it as
// \u0000, which PostgreSQL's jsonb (where the durable module's
// checkpoints are stored) refuses.
type StoredError struct {
	Text    string
	Matches []string `json:",omitempty"`
}

func (e *StoredError) Error() string { return e.Text }

// Is reports whether the error stored matched target, one of the errors
// MarshalJSON names.
func (e *StoredError) Is(target error) bool {
	for _, s := range storedSentinels {
		if s.err == target {
			return slices.Contains(e.Matches, s.name)
		}
	}
	return false
}

// storeError is err as a StoredError.
func storeError(err error) (s *StoredError) {
	if back, ok := err.(*StoredError); ok && back != nil && !strings.ContainsRune(back.Text, 0) {
		return back // read back, and stored again
	}
	// fmt.Sprint, not err.Error: a worker's error may be a nil pointer
	// whose Error method panics on it (fmt prints "<nil>").
	s = &StoredError{Text: strings.ReplaceAll(fmt.Sprint(err), "\x00", "\uFFFD")}
	// An Is or Unwrap method that panics (such a nil pointer's) leaves
	// the matches found before it, rather than fail the encoding.
	defer func() { _ = recover() }()
	for _, k := range storedSentinels {
		if errors.Is(err, k.err) {
			s.Matches = append(s.Matches, k.name)
		}
	}
	return s
}

// storedSentinels are the errors a StoredError keeps a match with, by
// name: the context package's two, and every sentinel of this package,
// since a node's result can hold any of them (a worker's own error may
// wrap ErrUnknownID from ResultOf or ErrPoolFull from a Pool; a SubGraph
// item's, a *GraphError of its graph). The names are stored: keep them.
var storedSentinels = []struct {
	name string
	err  error
}{
	{"context.Canceled", context.Canceled},
	{"context.DeadlineExceeded", context.DeadlineExceeded},
	{"asynctool.ErrSkipped", ErrSkipped},
	{"asynctool.ErrNotTaken", ErrNotTaken},
	{"asynctool.ErrRunEnded", ErrRunEnded},
	{"asynctool.ErrJoinFailed", ErrJoinFailed},
	{"asynctool.ErrJoinUndecided", ErrJoinUndecided},
	{"asynctool.ErrBadJoin", ErrBadJoin},
	{"asynctool.ErrResultType", ErrResultType},
	{"asynctool.ErrGoexit", ErrGoexit},
	{"asynctool.ErrStreamStopped", ErrStreamStopped},
	{"asynctool.ErrNoStart", ErrNoStart},
	{"asynctool.ErrNilWrapper", ErrNilWrapper},
	{"asynctool.ErrNilWorker", ErrNilWorker},
	{"asynctool.ErrDuplicateID", ErrDuplicateID},
	{"asynctool.ErrCycle", ErrCycle},
	{"asynctool.ErrUnreachableDependency", ErrUnreachableDependency},
	{"asynctool.ErrConflictingEdge", ErrConflictingEdge},
	{"asynctool.ErrReused", ErrReused},
	{"asynctool.ErrNilContext", ErrNilContext},
	{"asynctool.ErrNegativeTimeout", ErrNegativeTimeout},
	{"asynctool.ErrTooManyNodes", ErrTooManyNodes},
	{"asynctool.ErrClosed", ErrClosed},
	{"asynctool.ErrUnknownID", ErrUnknownID},
	{"asynctool.ErrNotPending", ErrNotPending},
	{"asynctool.ErrBadRetry", ErrBadRetry},
	{"asynctool.ErrBadTimeout", ErrBadTimeout},
	{"asynctool.ErrBadPolicy", ErrBadPolicy},
	{"asynctool.ErrBadLimit", ErrBadLimit},
	{"asynctool.ErrPoolClosed", ErrPoolClosed},
	{"asynctool.ErrPoolFull", ErrPoolFull},
	{"asynctool.ErrNilTask", ErrNilTask},
	{"asynctool.ErrSerialClosed", ErrSerialClosed},
	{"asynctool.ErrNaNKey", ErrNaNKey},
	{"asynctool.ErrUnhashableKey", ErrUnhashableKey},
	{"asynctool.ErrStreamClosed", ErrStreamClosed},
	{"asynctool.ErrStreamStarted", ErrStreamStarted},
	{"asynctool.ErrNotEnded", ErrNotEnded},
}
