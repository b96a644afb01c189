// Package asynctooltest helps unit-test code that builds and runs
// asynctool graphs, as net/http/httptest helps test HTTP handlers.
//
// It has four parts:
//
//   - fakes: workers that return a value ([Returns]), fail ([Fails]),
//     panic ([Panics]), take a while ([Sleeps]) or block until released
//     ([Blocks]), each a [*Fake] that counts its calls. Inside a
//     testing/synctest bubble, Sleeps takes virtual time, so a test of
//     deadlines and orderings runs instantly and exactly;
//   - a [Recorder] that collects what the nodes' callbacks saw
//     ([Callback] adapts it to a node);
//   - assertions on a run's [asynctool.Report]: [RanBefore], [RanOnce],
//     [WasSkipped], [NotTaken], [NeverStarted], [Succeeded], [Failed],
//     [TimedOut]. They name a node of a sub-run (a SubPlan's, SubGraph's
//     or ForEach's) by its path from the report's node: "profile/name",
//     "prices/2", and a node without an id by "#" and its index, "#0";
//   - [Run] and [RunWithin], which run a graph on a fresh Async that
//     records times and return its report, [Start] for tests that
//     act while the run is going on, and [RunPlan] for a compiled plan.
//
// Everything here is safe for concurrent use: fakes run on the run's
// goroutines while the test reads them.
//
// Virtual time makes durations exact, not the order in which goroutines
// run, in a bubble too. A start node whose only successor fails at once,
// because another must upstream of it is a [Fails] fake, is skipped if
// that failure comes before a goroutine takes it, and runs otherwise, as
// the scheduler decides (asynctool's README says so of start nodes).
// Assert [WasSkipped] or [NeverStarted] of a node behind an upstream that
// cannot have ended by then, or give the start node ShortCircuit(false)
// and assert that it ran.
//
// An [asynctool.Async] used inside a testing/synctest bubble must be made
// and closed inside it, as Run does: its pool's goroutines belong to the
// bubble that started them, so an Async shared with other tests, or
// warmed up outside the bubble, makes synctest panic (goroutines still
// blocked when the bubble ends) or the test binary stop with a fatal
// error (a channel of another bubble).
package asynctooltest
