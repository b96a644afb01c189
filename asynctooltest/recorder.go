package asynctooltest

import (
	"sync"

	"github.com/asynctool-go/asynctool"
)

// EventKind says which callback method an [Event] records.
type EventKind int

const (
	// Begin is a call of Callback.Begin: the node's worker was about to
	// run.
	Begin EventKind = iota + 1
	// Result is a call of Callback.Result: the node's result became final.
	Result
)

// String returns "begin" or "result", and "unknown" for any other value
// (the zero EventKind included).
func (k EventKind) String() string {
	switch k {
	case Begin:
		return "begin"
	case Result:
		return "result"
	}
	return "unknown"
}

// Event is one callback call seen by a [Recorder]. For a Begin event only
// ID and Kind are set.
type Event struct {
	// ID is the node's id; Kind is Begin or Result.
	ID   string
	Kind EventKind
	// Success, State, Value and Err are what the Result callback got:
	// its success flag and the result's state, value and error.
	Success bool
	State   asynctool.ResultState
	Value   any
	Err     error
}

// Recorder collects the callback calls of the nodes given [Callback]s
// that feed it, in the order they happened. Its zero value is ready to
// use; it is safe for concurrent use and must not be copied after first
// use.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *Recorder) add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Count returns how many events of the kind were recorded for id.
func (r *Recorder) Count(id string, kind EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.ID == id && e.Kind == kind {
			n++
		}
	}
	return n
}

// Last returns the last event of the kind recorded for id, and whether
// there was one.
func (r *Recorder) Last(id string, kind EventKind) (Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if e := r.events[i]; e.ID == id && e.Kind == kind {
			return e, true
		}
	}
	return Event{}, false
}

// Callback returns a callback for the node id that records its calls in
// rec. Pass it to [asynctool.WorkerWrapper.Callback].
func Callback[P, R any](rec *Recorder, id string) asynctool.Callback[P, R] {
	return recording[P, R]{rec, id}
}

type recording[P, R any] struct {
	rec *Recorder
	id  string
}

func (c recording[P, R]) Begin() { c.rec.add(Event{ID: c.id, Kind: Begin}) }

func (c recording[P, R]) Result(success bool, _ P, r asynctool.WorkResult[R]) {
	c.rec.add(Event{ID: c.id, Kind: Result, Success: success, State: r.State, Value: r.Value, Err: r.Err})
}
