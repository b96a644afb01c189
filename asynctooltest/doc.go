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
//     [TimedOut];
//   - [Run] and [RunWithin], which run a graph on a fresh Async that
//     records times and return its report, and [Start] for tests that
//     act while the run is going on.
//
// Everything here is safe for concurrent use: fakes run on the run's
// goroutines while the test reads them.
package asynctooltest
