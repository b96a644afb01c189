// Package asynctool orchestrates a request's work as a directed acyclic
// graph of typed tasks that run in parallel inside one process.
//
// A [Worker] does one piece of work (typically an RPC). A [WorkerWrapper]
// wraps a worker with its parameter, an optional [Callback], and its edges:
// [WorkerWrapper.Depend] declares an upstream node as a must or optional
// dependency. [Async.BeginWork] runs the graph reachable from the start
// nodes on a bounded goroutine pool under one group deadline, and every
// node's typed [WorkResult] is available afterwards.
package asynctool
