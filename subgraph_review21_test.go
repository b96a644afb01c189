package asynctool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS21RCompileRejectsAForEachJoinNoListFits: a ForEach Join that no list
// of items can satisfy is refused by Compile (and BeginWork) with
// ErrBadJoin, as the same Join on a node is, instead of failing every run
// of the plan at run time with a GraphError about a hidden node "join"
// (and succeeding on an empty list). Item ids are "0", "1", ...: a name
// that is no index can never be an upstream of the join, and R is fixed,
// so When's type is known too.
func TestS21RCompileRejectsAForEachJoinNoListFits(t *testing.T) {
	items := func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2, 3}, nil }
	a := newAsync(t)
	for name, j := range map[string]Join{
		"AtLeast(0)":             AtLeast(0),
		"AtLeast(-1)":            AtLeast(-1),
		"NamedSucceeded()":       NamedSucceeded(),
		`NamedSucceeded("join")`: NamedSucceeded("0", "join"),
		`NamedSucceeded("01")`:   NamedSucceeded("01"),
		`NamedSucceeded("-1")`:   NamedSucceeded("-1"),
		"CustomJoin(nil)":        CustomJoin(nil),
		"When nil cond":          When[int]("0", nil),
		"When a string":          When("0", func(string) bool { return true }),
		`When("x")`:              When("x", func(int) bool { return true }),
		"WhenResult a string":    WhenResult("1", func(WorkResult[string]) bool { return true }),
	} {
		w := NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0)
		_, err := Compile(w)
		if assert.Error(t, err, name) {
			assert.ErrorIs(t, err, ErrBadJoin, name)
			assert.ErrorContains(t, err, `node "each"`, name)
			assert.ErrorContains(t, err, "ForEach's Join", name)
		}
		w = NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0)
		assert.ErrorIs(t, a.BeginWork(context.Background(), 0, w), ErrBadJoin, name)
	}
	// Joins a list may fit are for the run to check, against its items.
	for name, j := range map[string]Join{
		"AtLeast(3)":                AtLeast(3),
		`NamedSucceeded("0", "10")`: NamedSucceeded("0", "10"),
		`When("2")`:                 When("2", func(int) bool { return true }),
		"When any":                  When("0", func(any) bool { return true }),
		"WhenResult":                WhenResult("0", func(WorkResult[int]) bool { return true }),
		"CustomJoin":                CustomJoin(func([]Upstream) Decision { return DecideRun }),
	} {
		_, err := Compile(NewWrapper("each", ForEach[int, int, int]{Items: items, Worker: okWorker(), Join: j}, 0))
		require.NoError(t, err, name)
	}
}

// reviewCallback is a Callback from a function of the result.
type reviewCallback[P, R any] func(r WorkResult[R])

func (reviewCallback[P, R]) Begin()                                {}
func (f reviewCallback[P, R]) Result(_ bool, _ P, r WorkResult[R]) { f(r) }

// TestS21RAJoinNoItemsCanMeetFailsOnAnEmptyList: a Join that names items
// or counts successes (AtLeast(n), NamedSucceeded, When, WhenResult) fails
// the node with ErrBadJoin when the list has too few items for it, as
// AtLeast(3) over 2 items does, and so also when the list is empty: a
// quorum of 2 over no items is not met. Before, an empty list skipped the
// join and the node succeeded with an empty result, while one item more
// made it fail. Joins that an empty list meets (the zero Join,
// AllSucceeded, AllDone, AnySucceeded, CustomJoin: as for a node with no
// upstreams, which runs) still give an empty result.
func TestS21RAJoinNoItemsCanMeetFailsOnAnEmptyList(t *testing.T) {
	a := newAsync(t)
	run := func(j Join, items ...int) WorkResult[[]WorkResult[int]] {
		t.Helper()
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return items, nil },
			Worker: okWorker(),
			Join:   j,
		}, 0)
		r, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		return each.Result()
	}
	for name, j := range map[string]Join{
		"AtLeast(2)":          AtLeast(2),
		`NamedSucceeded("0")`: NamedSucceeded("0"),
		`When("0")`:           When("0", func(int) bool { return true }),
		`WhenResult("0")`:     WhenResult("0", func(WorkResult[int]) bool { return true }),
		"AnySucceeded":        AnySucceeded(), // a read of any replica over no replicas read nothing
	} {
		if name == "AtLeast(2)" {
			assert.ErrorIs(t, run(j, 1).Err, ErrBadJoin, "%s over one item", name)
		}
		r := run(j)
		assert.ErrorIs(t, r.Err, ErrBadJoin, "%s over no items", name)
		assert.ErrorContains(t, r.Err, "ForEach's join ("+j.String()+")", name)
		assert.ErrorContains(t, r.Err, "0 items", name)
	}
	for name, j := range map[string]Join{
		"zero":         {},
		"AllSucceeded": AllSucceeded(),
		"AllDone":      AllDone(),
		"CustomJoin":   CustomJoin(func([]Upstream) Decision { return DecideFail }),
	} {
		assert.Equal(t, WorkResult[[]WorkResult[int]]{Value: []WorkResult[int]{}, State: ResultSuccess}, run(j), name)
	}
}

// TestS21RAJoinTooFewItemsMeetNamesTheItems: the error of a Join that the
// list has too few items for speaks of the ForEach's join and its items,
// not of a GraphError about a node "join" and its upstreams, which the
// caller never made; and Node is not called for a graph that cannot run.
func TestS21RAJoinTooFewItemsMeetNamesTheItems(t *testing.T) {
	a := newAsync(t)
	for j, want := range map[*Join]string{
		ptr(AtLeast(4)):                                `asynctool: ForEach's join (at least 4 succeeded): asynctool: invalid join: 3 items cannot make 4 successes`,
		ptr(NamedSucceeded("0", "3")):                  `asynctool: ForEach's join (named ["0" "3"] succeeded): asynctool: invalid join: it names item "3", and there are 3 items`,
		ptr(When("5", func(int) bool { return true })): `asynctool: ForEach's join (when "5"): asynctool: invalid join: it names item "5", and there are 3 items`,
	} {
		nodes := 0
		each := NewWrapper("each", ForEach[int, int, int]{
			Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{1, 2, 3}, nil },
			Worker: okWorker(),
			Node:   func(int, int, *WorkerWrapper[int, int]) { nodes++ },
			Join:   *j,
		}, 0)
		r, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		assert.EqualError(t, each.Result().Err, want)
		assert.ErrorIs(t, each.Result().Err, ErrBadJoin)
		assert.Zero(t, nodes, want)
		assert.Nil(t, subNode(t, r.Report(), "each").Sub, "nothing ran")
	}
}

func ptr[T any](v T) *T { return &v }

// TestS21RHedgedForEachReportShowsTheWinner: a Hedged ForEach whose first
// call wins, after the hedge started a second one, returns the first
// call's items, and its report should show the first call's sub-run. It
// shows the last one started (the documented rule for SubPlan, "each call
// of a Hedged worker is a sub-run of its own ... Report shows the last one
// started"): the loser's, cancelled, so the node "succeeded" with item 0's
// value while its Sub says item 0 "timed out (context canceled)".
func TestS21RHedgedForEachReportShowsTheWinner(t *testing.T) {
	a := newAsync(t)
	var calls atomic.Int32
	fe := ForEach[int, int, int]{
		Items:  func(context.Context, int, Wrappers) ([]int, error) { return []int{int(calls.Add(1))}, nil },
		Worker: firstCallWins(10 * time.Millisecond),
	}
	each := NewWrapper("each", Hedged[int, []WorkResult[int]](fe, 5*time.Millisecond, 2), 0)
	run, err := a.Start(context.Background(), time.Minute, each)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	require.Equal(t, 1, each.Result().Value[0].Value, "the first call won")
	sub := subNode(t, run.Report(), "each").Sub
	require.NotNil(t, sub)
	assert.Equal(t, StatusSucceeded, sub.Nodes[0].Status, "the report shows the sub-run whose items the node returned:\n%v", sub)
}

// firstCallWins is the worker of an item whose param is the number of the
// hedged call that made it: call 1's returns 1 after first, the hedge's
// (call 2) only when cancelled.
func firstCallWins(first time.Duration) WorkerFunc[int, int] {
	return func(ctx context.Context, call int, _ Wrappers) (int, error) {
		d := first
		if call == 2 {
			d = time.Minute
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(d):
		}
		return call, nil
	}
}

// TestS21FReportFromAStoppedItemsCallback: a Result callback of an item
// that the sub-run's sweep stops, which calls Report on the outer run
// while the outer run goes on (and again once it has ended), returns:
// Report does not wait for a sweep that is running the caller. Before, it
// waited for itself, for good, and Close with it (helper-90 found it).
//
// It runs on a real clock: an item's goroutine held back past each's
// Timeout runs its own callback, not the sweep, which is how it hung
// before 4028a04 (under synctest the sweep runs every callback). A run in
// which each's goroutine was held back past the 5ms Timeout before it
// called Items has no sub-run and no item callback: it is run again (it
// waited 30s for reports that could never come, 4 runs in 50 with
// CHAOS=5, each reported "stopped before it started").
func TestS21FReportFromAStoppedItemsCallback(t *testing.T) {
	for try := 0; !s21fReportFromAStoppedItemsCallback(t); try++ {
		if try == 9 {
			t.Fatal("each ended before it called Items in 10 runs")
		}
	}
}

// s21fReportFromAStoppedItemsCallback runs TestS21F's case once; false
// if each ended before it called Items.
func s21fReportFromAStoppedItemsCallback(t *testing.T) bool {
	a := newAsync(t)
	gate := make(chan struct{})
	release := releaser(t, gate)
	var run *Run
	started := make(chan struct{})
	reported := make(chan *Report, 3)
	itemsCalled := make(chan struct{})
	calledItems := sync.OnceFunc(func() { close(itemsCalled) })
	called := func() bool {
		select {
		case <-itemsCalled:
			return true
		default:
			return false
		}
	}
	each := NewWrapper("each", ForEach[int, int, int]{
		Items: func(context.Context, int, Wrappers) ([]int, error) {
			calledItems()
			return []int{1, 2, 3}, nil
		},
		Worker: WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
			<-gate // ignores its ctx
			return 0, nil
		}),
		Node: func(_ int, _ int, n *WorkerWrapper[int, int]) {
			n.Callback(reviewCallback[int, int](func(r WorkResult[int]) {
				if r.State == ResultTimeout {
					<-started
					reported <- run.Report()
				}
			}))
		},
	}, 0).Timeout(5 * time.Millisecond)
	other := NewWrapper("other", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		<-gate // keeps the run going
		return 1, nil
	}), 0)
	var err error
	run, err = a.Start(context.Background(), time.Minute, each, other)
	require.NoError(t, err)
	close(started)
	for deadline := time.Now().Add(30 * time.Second); !called() && each.State() != StateError; {
		require.True(t, time.Now().Before(deadline), "each neither called Items nor ended")
		time.Sleep(time.Millisecond)
	}
	if !called() {
		// each ended first. Its goroutine may still call Items if it was
		// past its checks: once the run is done, it cannot.
		release()
		_ = run.Wait(context.Background())
		require.NoError(t, a.Close())
		if !called() {
			return false
		}
	}
	for range 3 {
		select {
		case rep := <-reported:
			assert.NotNil(t, subNode(t, rep, "each").Sub, "a snapshot, taken while the sweep ran the callback")
		case <-time.After(30 * time.Second):
			t.Fatal("Report, called from a stopped item's callback, did not return")
		}
	}
	release()
	require.NoError(t, run.Wait(context.Background()))
	require.NoError(t, a.Close()) // the sub-run's sweep has returned
	for _, n := range subNode(t, run.Report(), "each").Sub.Nodes {
		assert.Equal(t, StatusTimedOut, n.Status, n.ID)
	}
	return true
}

// TestJoinMisfitCountsInWords: the error of a join the items cannot meet
// says "1 item" and "1 success", not "1 items" and "1 successes".
func TestJoinMisfitCountsInWords(t *testing.T) {
	for _, c := range []struct {
		j    Join
		ids  []string
		want string
	}{
		{AtLeast(1), nil, "0 items cannot make 1 success"},
		{AtLeast(2), []string{"0"}, "1 item cannot make 2 successes"},
		{AtLeast(4), []string{"0", "1", "2"}, "3 items cannot make 4 successes"},
		{AnySucceeded(), nil, "0 items cannot make 1 success"},
		{NamedSucceeded("1"), []string{"0"}, `it names item "1", and there is 1 item`},
	} {
		assert.Equal(t, c.want, c.j.misfit(c.ids), c.j.String())
	}
}
