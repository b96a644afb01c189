package asynctooltest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/asynctool-go/asynctool/asynctooltest"
)

// A test of a graph with a failing dependency: the fakes stand in for the
// RPCs, Run runs the graph, and the assertions read its report. This is
// the body of a func TestPage(t *testing.T); the example is compiled, not
// run, because it needs the test's t.
func ExampleRun() {
	var t *testing.T // the test's t

	errDown := errors.New("recs down")
	user := asynctool.NewWrapper("user", asynctooltest.Returns[int64]("ada"), 42)
	recs := asynctool.NewWrapper("recs", asynctooltest.Fails[int64, []string](errDown), 42).
		Default([]string{"bestsellers"})
	page := asynctool.NewWrapper("page", asynctooltest.Returns[int64]("<html>"), 42).
		Depend(user, true).
		Depend(recs, false)

	rep := asynctooltest.Run(t, user, recs)

	asynctooltest.Succeeded(t, rep, "page")
	asynctooltest.RanBefore(t, rep, "user", "page")
	asynctooltest.Failed(t, rep, "recs", errDown)
	_ = page
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
