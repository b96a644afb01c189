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
// run, in a bubble too. A start node that its only successor no longer
// needs is skipped if that comes before a goroutine takes it, and runs
// otherwise, as the scheduler decides (asynctool's README says so of
// start nodes): an optional start node whose successor runs at once on
// its must upstreams, all instant fakes ([Returns]), or a start node
// whose successor fails at once, because another must upstream of it is
// a [Fails] fake. So a test that asserts what such a node did gives the
// must upstream a [Sleeps] fake, which holds the successor back while
// the start node runs (ExampleRun), or gives the start node
// ShortCircuit(false); and it asserts [WasSkipped] or [NeverStarted] only
// of a node behind an upstream that cannot have ended by then.
//
// An [asynctool.Async] used inside a testing/synctest bubble must be made
// and closed inside it, as Run does: its pool's goroutines belong to the
// bubble that started them, so an Async shared with other tests, or
// warmed up outside the bubble, makes synctest panic (goroutines still
// blocked when the bubble ends) or the test binary stop with a fatal
// error (a channel of another bubble). A compiled [asynctool.Plan] is not
// bound to a bubble: one compiled outside it (at start-up, or in a package
// variable, as a service compiles its plans) runs inside it, and in
// several bubbles in turn, as it keeps no goroutine, timer or channel
// from one run to the next.
package asynctooltest
