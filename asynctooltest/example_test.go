package asynctooltest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
)

// A test of a page whose optional recs backend is down: the fakes stand
// in for the RPCs, Run runs the graph, and the assertions read its
// report. This is the body of a func TestPage(t *testing.T); the example
// is compiled, not run, because it needs the test's t
// (TestDownOptionalBackendFailsWhileThePageSucceeds runs it).
//
// The user fake takes 10ms, virtual time under synctest, on purpose:
// with an instant fake for user too, page could run before recs, an
// optional start node, got a goroutine, and recs would then be skipped
// (nothing needs it any more) rather than fail, and the last assertion
// would fail (see the package documentation).
func ExampleRun() {
	var t *testing.T // the test's t

	synctest.Test(t, func(t *testing.T) {
		errDown := errors.New("recs down")
		user := asynctool.NewWrapper("user", asynctooltest.Sleeps[int64](10*time.Millisecond, "ada"), 42)
		recs := asynctool.NewWrapper("recs", asynctooltest.Fails[int64, []string](errDown), 42).
			Default([]string{"bestsellers"})
		asynctool.NewWrapper("page", asynctooltest.Returns[int64]("<html>"), 42).
			Depend(user, true).
			Depend(recs, false)

		rep := asynctooltest.Run(t, user, recs)

		asynctooltest.Succeeded(t, rep, "page")
		asynctooltest.RanBefore(t, rep, "user", "page")
		asynctooltest.Failed(t, rep, "recs", errDown)
	})
}

// Fakes and a Recorder also work with a plain Async: a fake counts its
// calls, and the Recorder sees every callback, including the Result of a
// node that never ran.
func ExampleRecorder() {
	var rec asynctooltest.Recorder
	bad := asynctooltest.Fails[int, int](errors.New("boom"))
	never := asynctooltest.Returns[int](1)
	a := asynctool.NewWrapper("a", bad, 0).Callback(asynctooltest.Callback[int, int](&rec, "a"))
	asynctool.NewWrapper("b", never, 0).
		Depend(a, true).
		Callback(asynctooltest.Callback[int, int](&rec, "b"))

	async := asynctool.New()
	defer async.Close()
	_ = async.BeginWork(context.Background(), 0, a)

	fmt.Println("a called", bad.Calls(), "b called", never.Calls())
	for _, e := range rec.Events() {
		fmt.Println(e.ID, e.Kind, e.State, e.Err)
	}
	// Output:
	// a called 1 b called 0
	// a begin default <nil>
	// a result exception boom
	// b result exception asynctool: upstream "a" failed: boom
}
