package asynctool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Session 23 review of 3d9beab (a ForEach.Budget stop counts an item
// under PolicyContinue as done) and f130939 (a ForEach's static shape in
// reports).

// s23Item is how one item of s23Each behaves: it returns i*10 after d,
// or fails after d if fail is set; it returns ctx.Err() if its context
// ends first. policy is its failure policy (0 leaves it alone).
type s23Item struct {
	d      time.Duration
	fail   bool
	policy FailurePolicy
}

// s23Each is a ForEach over items, each item's node recorded in nodes
// (sized by the call) with Default(-1) and its policy.
func s23Each(items []s23Item, nodes []*WorkerWrapper[int, int]) ForEach[int, int, int] {
	return ForEach[int, int, int]{
		Items: func(context.Context, int, Wrappers) ([]int, error) {
			idx := make([]int, len(items))
			for i := range idx {
				idx[i] = i
			}
			return idx, nil
		},
		Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
			select {
			case <-time.After(items[i].d):
				if items[i].fail {
					return 0, fmt.Errorf("item %d failed", i)
				}
				return i * 10, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}),
		Node: func(i int, _ int, n *WorkerWrapper[int, int]) {
			n.Default(-1)
			if items[i].policy != 0 {
				n.OnFailure(items[i].policy)
			}
			if nodes != nil {
				nodes[i] = n
			}
		},
	}
}

// s23Continued reports whether item n, whose sub-run has ended, was
// marked as done under PolicyContinue.
func s23Continued(n *WorkerWrapper[int, int]) bool {
	r := n.singleRun()
	if r == nil {
		return false
	}
	return r.nodes[n.idx].continued.Load()
}

// s23Recorder is a custom join that waits for every item and records
// what it saw of them (ID -> OK), then answers DecideRun.
type s23Recorder struct {
	mu  sync.Mutex
	saw map[string]bool
}

func (rec *s23Recorder) join() Join {
	return onceAllEnded(func(ups []Upstream) Decision {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.saw = map[string]bool{}
		for _, u := range ups {
			rec.saw[u.ID] = u.OK
		}
		return DecideRun
	})
}

func (rec *s23Recorder) ok() map[string]bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.saw
}

// The stopped items keep their default and the Budget's error in the
// node's result and in the report, all with the one *BudgetError; only
// they (and an item that failed on its own) are marked as done under
// PolicyContinue, the one kept back by the Limit included; the node and
// its join succeed. Under Limit 2: 0 and 1 start at once, 0 ends at
// 10ms, 2 starts then and fails at 30ms, 3 starts then; at 50ms the
// Budget stops 1 and 3, and 4 never starts.
func TestS23RBudgetContinueKeepsDefaultsAndBudgetError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		nodes := make([]*WorkerWrapper[int, int], 5)
		items := []s23Item{
			{d: 10 * time.Millisecond, policy: PolicyContinue},
			{d: time.Second, policy: PolicyContinue},                       // stopped
			{d: 20 * time.Millisecond, fail: true, policy: PolicyContinue}, // fails on its own: continued anyway
			{d: time.Second, policy: PolicyContinue},                       // stopped
			{d: time.Second, policy: PolicyContinue},                       // kept back by the Limit, never starts
		}
		f := s23Each(items, nodes)
		f.Limit = 2
		f.Budget = 50 * time.Millisecond
		f.Join = AllSucceeded()
		each := NewWrapper("each", f, 0)
		run, err := a.Start(context.Background(), time.Minute, each)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		synctest.Wait()
		res := each.Result()
		require.NoError(t, res.Err)
		require.Len(t, res.Value, 5)
		assert.Equal(t, 0, res.Value[0].Value)
		assert.Equal(t, -1, res.Value[2].Value)
		assert.EqualError(t, res.Value[2].Err, "item 2 failed")
		stopped := []int{1, 3, 4}
		var first *BudgetError
		for _, i := range stopped {
			r := res.Value[i]
			assert.Equal(t, -1, r.Value, "item %d", i)
			assert.Equal(t, ResultTimeout, r.State, "item %d", i)
			var be *BudgetError
			require.ErrorAs(t, r.Err, &be, "item %d", i)
			if first == nil {
				first = be
			}
			assert.Same(t, first, be, "one BudgetError for the sub-run")
			assert.Equal(t, 50*time.Millisecond, be.Budget)
		}
		var done []bool
		for _, n := range nodes {
			done = append(done, s23Continued(n))
		}
		assert.Equal(t, []bool{false, true, true, true, true}, done)

		rep := run.Report()
		assert.Equal(t, StatusSucceeded, rep.Nodes[0].Status)
		sub := rep.Nodes[0].Sub
		require.NotNil(t, sub)
		require.Len(t, sub.Nodes, 6)
		for _, i := range stopped {
			assert.Equal(t, StatusTimedOut, sub.Nodes[i].Status, "item %d", i)
			assert.Equal(t, -1, sub.Nodes[i].Value, "item %d", i)
			var be *BudgetError
			assert.ErrorAs(t, sub.Nodes[i].Err, &be, "item %d", i)
		}
		assert.True(t, sub.Nodes[1].Ran)
		assert.True(t, sub.Nodes[3].Ran)
		assert.False(t, sub.Nodes[4].Ran)
		assert.Equal(t, "join", sub.Nodes[5].ID)
		var be *BudgetError
		assert.ErrorAs(t, sub.Nodes[5].Err, &be, "the join was stopped after it decided")
		assert.Equal(t, StatusTimedOut, sub.Nodes[5].Status)
		assert.Contains(t, []string{"1", "3", "4"}, sub.Nodes[5].DecidedBy, "a stopped item's end decided the join")
		assert.NoError(t, rep.Err(), "the node's error is its Join's; the sub-run's are in Sub.Err")
		assert.Error(t, sub.Err())
	})
}

// Each stop that is not the Budget's leaves items under PolicyContinue
// not done: the run's deadline, a Cancel of the outer run, the node's
// own Timeout, a RetryPolicy's AttemptTimeout, all before the Budget.
// The custom join (asked once every item ended) sees them not OK, and
// the items' errors are not the BudgetError.
func TestS23ROtherStopsAreNotTheBudget(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(w *WorkerWrapper[int, []WorkResult[int]])
		timeout time.Duration
		cancel  bool
	}{
		{name: "run deadline", timeout: 40 * time.Millisecond},
		{name: "cancel", timeout: time.Minute, cancel: true},
		{name: "node timeout", timeout: time.Minute, setup: func(w *WorkerWrapper[int, []WorkResult[int]]) { w.Timeout(40 * time.Millisecond) }},
		{name: "attempt timeout", timeout: time.Minute, setup: func(w *WorkerWrapper[int, []WorkResult[int]]) {
			w.Retry(RetryPolicy{Attempts: 1, AttemptTimeout: 40 * time.Millisecond})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				nodes := make([]*WorkerWrapper[int, int], 3)
				f := s23Each([]s23Item{
					{d: 10 * time.Millisecond, policy: PolicyContinue},
					{d: time.Second, policy: PolicyContinue},
					{d: time.Second, policy: PolicyContinue},
				}, nodes)
				f.Budget = 100 * time.Millisecond
				var rec s23Recorder
				f.Join = rec.join()
				each := NewWrapper("each", f, 0)
				if c.setup != nil {
					c.setup(each)
				}
				run, err := a.Start(context.Background(), c.timeout, each)
				require.NoError(t, err)
				if c.cancel {
					time.Sleep(40 * time.Millisecond)
					run.Cancel()
				}
				_ = run.Wait(context.Background())
				synctest.Wait() // the sub-run's sweep
				assert.Equal(t, map[string]bool{"0": true, "1": false, "2": false}, rec.ok())
				for _, i := range []int{1, 2} {
					assert.False(t, s23Continued(nodes[i]), "item %d", i)
					var be *BudgetError
					r := nodes[i].Result()
					assert.False(t, errors.As(r.Err, &be), "item %d: %v", i, r.Err)
				}
				var be *BudgetError
				assert.False(t, errors.As(each.Result().Err, &be), "%v", each.Result().Err)
			})
		})
	}
}

// An item under PolicyEnd that fails ends the sub-run before the Budget:
// the items it stopped are not done, and the node fails with the
// EndError. An item under PolicyEnd that the Budget stops does not end
// the run (PolicyEnd answers the node's own failure, and the Budget is
// no failure of it): the node goes on.
func TestS23RPolicyEndAndTheBudget(t *testing.T) {
	t.Run("end before the budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			nodes := make([]*WorkerWrapper[int, int], 3)
			f := s23Each([]s23Item{
				{d: 10 * time.Millisecond, fail: true, policy: PolicyEnd},
				{d: time.Second, policy: PolicyContinue},
				{d: time.Second, policy: PolicyContinue},
			}, nodes)
			f.Budget = 50 * time.Millisecond
			f.Join = AllSucceeded()
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			synctest.Wait()
			var ee *EndError
			require.ErrorAs(t, each.Result().Err, &ee)
			assert.Equal(t, "0", ee.ID)
			for _, i := range []int{1, 2} {
				assert.False(t, s23Continued(nodes[i]), "item %d", i)
				assert.ErrorAs(t, nodes[i].Result().Err, &ee, "item %d", i)
			}
		})
	})
	t.Run("budget stops a PolicyEnd item", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			nodes := make([]*WorkerWrapper[int, int], 3)
			f := s23Each([]s23Item{
				{d: 10 * time.Millisecond, policy: PolicyContinue},
				{d: time.Second, policy: PolicyEnd},
				{d: time.Second, policy: PolicyContinue},
			}, nodes)
			f.Budget = 50 * time.Millisecond
			f.Join = AllDone()
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			synctest.Wait()
			require.NoError(t, each.Result().Err)
			assert.False(t, s23Continued(nodes[1]))
			assert.True(t, s23Continued(nodes[2]))
			var be *BudgetError
			assert.ErrorAs(t, nodes[1].Result().Err, &be)
		})
	})
}

// A join that runs (EndsRun) before the Budget stops the other items
// with ErrRunEnded: they are not marked done, and the node succeeds.
func TestS23RJoinEndsTheRunBeforeTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		nodes := make([]*WorkerWrapper[int, int], 3)
		f := s23Each([]s23Item{
			{d: 10 * time.Millisecond, policy: PolicyContinue},
			{d: time.Second, policy: PolicyContinue},
			{d: time.Second, policy: PolicyContinue},
		}, nodes)
		f.Budget = 50 * time.Millisecond
		f.Join = AnySucceeded()
		each := NewWrapper("each", f, 0)
		start := time.Now()
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		synctest.Wait()
		require.NoError(t, each.Result().Err)
		for _, i := range []int{1, 2} {
			assert.False(t, s23Continued(nodes[i]), "item %d", i)
			assert.ErrorIs(t, nodes[i].Result().Err, ErrRunEnded, "item %d", i)
		}
	})
}

// A ForEach whose items are ForEach nodes, each level under a Budget.
// The outer Budget running out first stops the inner items with the
// outer BudgetError, which is not the inner run's: the inner items are
// not done and the inner node fails, while the outer item (PolicyContinue)
// counts as done. The inner Budget running out first marks the inner
// items done, and every level succeeds.
func TestS23RNestedForEachBudgets(t *testing.T) {
	for _, c := range []struct {
		name         string
		outer, inner time.Duration
	}{
		{"outer first", 30 * time.Millisecond, time.Minute},
		{"inner first", time.Minute, 30 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				var mu sync.Mutex
				var inner [][]*WorkerWrapper[int, int]
				var recs []*s23Recorder
				innerEach := ForEach[int, int, []WorkResult[int]]{
					Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
					Worker: WorkerFunc[int, []WorkResult[int]](func(ctx context.Context, _ int, all Wrappers) ([]WorkResult[int], error) {
						nodes := make([]*WorkerWrapper[int, int], 2)
						f := s23Each([]s23Item{
							{d: 10 * time.Millisecond, policy: PolicyContinue},
							{d: time.Hour, policy: PolicyContinue},
						}, nodes)
						f.Budget = c.inner
						rec := &s23Recorder{}
						f.Join = rec.join()
						mu.Lock()
						inner, recs = append(inner, nodes), append(recs, rec)
						mu.Unlock()
						return f.Action(ctx, 0, all)
					}),
					Node: func(_ int, _ int, n *WorkerWrapper[int, []WorkResult[int]]) {
						n.OnFailure(PolicyContinue)
					},
					Budget: c.outer,
					Join:   AllSucceeded(),
				}
				outer := NewWrapper("outer", innerEach, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Hour, outer))
				synctest.Wait()
				res := outer.Result()
				require.NoError(t, res.Err)
				require.Len(t, res.Value, 2)
				require.Len(t, inner, 2)
				for k := range inner {
					r := res.Value[k]
					assert.Equal(t, map[string]bool{"0": true, "1": c.name == "inner first"}, recs[k].ok(), "outer item %d", k)
					assert.Equal(t, c.name == "inner first", s23Continued(inner[k][1]), "outer item %d", k)
					var be *BudgetError
					if c.name == "outer first" {
						require.ErrorAs(t, r.Err, &be, "outer item %d", k)
						assert.Equal(t, c.outer, be.Budget)
						require.ErrorAs(t, inner[k][1].Result().Err, &be)
						assert.Equal(t, c.outer, be.Budget, "the inner item was stopped by the outer Budget")
					} else {
						require.NoError(t, r.Err, "outer item %d", k)
						require.Len(t, r.Value, 2)
						require.ErrorAs(t, r.Value[1].Err, &be)
						assert.Equal(t, c.inner, be.Budget)
					}
				}
			})
		})
	}
}

// Items that depend on other items (a Depend made in Node): an item
// under PolicyContinue whose upstream item the Budget stopped is kept
// from starting by the Budget, and counts as done, whatever the
// upstream's policy; without the Budget (the upstream failing on its
// own, PolicyFail), it fails with the UpstreamError and is not done.
func TestS23RItemsDependingOnItems(t *testing.T) {
	for _, c := range []struct {
		name       string
		upPolicy   FailurePolicy
		upFails    bool
		wantDone   bool
		wantBudget bool
	}{
		{"upstream continue, stopped", PolicyContinue, false, true, true},
		{"upstream fail, stopped", PolicyFail, false, true, true},
		{"upstream fail, failed", PolicyFail, true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				nodes := make([]*WorkerWrapper[int, int], 3)
				d := time.Second
				if c.upFails {
					d = 10 * time.Millisecond
				}
				items := []s23Item{
					{d: d, fail: c.upFails, policy: c.upPolicy},
					{d: 10 * time.Millisecond, policy: PolicyContinue}, // after item 0
					{d: 10 * time.Millisecond, policy: PolicyContinue},
				}
				f := s23Each(items, nodes)
				node := f.Node
				f.Node = func(i int, item int, n *WorkerWrapper[int, int]) {
					node(i, item, n)
					if i == 1 {
						n.Depend(nodes[0], true)
					}
				}
				f.Budget = 50 * time.Millisecond
				var rec s23Recorder
				f.Join = rec.join()
				each := NewWrapper("each", f, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
				synctest.Wait()
				require.NoError(t, each.Result().Err)
				r1 := nodes[1].Result()
				assert.Equal(t, c.wantDone, s23Continued(nodes[1]), "item 1: %v", r1.Err)
				assert.Equal(t, c.wantDone, rec.ok()["1"])
				var be *BudgetError
				assert.Equal(t, c.wantBudget, errors.As(r1.Err, &be), "item 1: %v", r1.Err)
				assert.Equal(t, -1, r1.Value)
			})
		})
	}
}

// The built-in joins count an item the Budget stopped under
// PolicyContinue as a success, as they count one its own Timeout ended:
// AnySucceeded and AtLeast are met by stopped items alone (item 0 fails
// on its own under PolicyFail), and When's condition gets the stopped
// item's default.
func TestS23RCountingJoinsCountStoppedItemsAsSuccesses(t *testing.T) {
	failing := []s23Item{
		{d: 10 * time.Millisecond, fail: true, policy: PolicyFail},
		{d: time.Second, policy: PolicyContinue},
		{d: time.Second, policy: PolicyContinue},
	}
	succeeding := []s23Item{
		{d: 10 * time.Millisecond},
		{d: time.Second, policy: PolicyContinue},
		{d: time.Second, policy: PolicyContinue},
	}
	var got []int
	var mu sync.Mutex
	for _, c := range []struct {
		items []s23Item
		join  Join
		ok    bool
	}{
		{failing, AnySucceeded(), true},
		{failing, AtLeast(2), true},
		{failing, AtLeast(3), false},
		{failing, AllSucceeded(), false},
		{succeeding, AllSucceeded(), true},
		{succeeding, When("1", func(v int) bool { mu.Lock(); got = append(got, v); mu.Unlock(); return true }), true},
		{succeeding, When("1", func(v int) bool { return false }), false},
	} {
		t.Run(c.join.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				f := s23Each(c.items, nil)
				f.Budget = 50 * time.Millisecond
				f.Join = c.join
				each := NewWrapper("each", f, 0)
				require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
				synctest.Wait()
				err := each.Result().Err
				if c.ok {
					require.NoError(t, err)
					return
				}
				require.Error(t, err)
			})
		})
	}
	assert.Equal(t, []int{-1}, got, "When's condition got the stopped item's default")
}

// An item under PolicyContinue with a RetryPolicy, stopped by the Budget
// in its fourth attempt (10ms each, 5ms apart), counts as done with the
// Budget's error, not its last failed attempt's.
func TestS23RStoppedInARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		nodes := make([]*WorkerWrapper[int, int], 2)
		f := s23Each([]s23Item{
			{d: 10 * time.Millisecond, policy: PolicyContinue},
			{d: 10 * time.Millisecond, fail: true, policy: PolicyContinue},
		}, nodes)
		node := f.Node
		f.Node = func(i int, item int, n *WorkerWrapper[int, int]) {
			node(i, item, n)
			if i == 1 {
				n.Retry(RetryPolicy{Attempts: 5, Backoff: func(int) time.Duration { return 5 * time.Millisecond }})
			}
		}
		f.Budget = 50 * time.Millisecond
		f.Join = AllSucceeded()
		each := NewWrapper("each", f, 0)
		require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
		synctest.Wait()
		require.NoError(t, each.Result().Err)
		assert.True(t, s23Continued(nodes[1]))
		var be *BudgetError
		assert.ErrorAs(t, nodes[1].Result().Err, &be)
	})
}

// The rule holds for each of the ways an item ends as the Budget runs
// out, run many times: the worker returns on ctx.Done (before or after
// the sweep reaches it), the worker ignores its context (the sweep ends
// it), the item has not started (Limit).
func TestS23RBudgetContinueRacingEnds(t *testing.T) {
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			nodes := make([]*WorkerWrapper[int, int], 4)
			f := s23Each([]s23Item{
				{d: 30 * time.Millisecond, policy: PolicyContinue}, // ends at the Budget's instant
				{d: time.Second, policy: PolicyContinue},
				{d: time.Second, policy: PolicyContinue},
				{d: time.Second, policy: PolicyContinue},
			}, nodes)
			worker := f.Worker
			f.Worker = WorkerFunc[int, int](func(ctx context.Context, i int, all Wrappers) (int, error) {
				if i == 2 {
					time.Sleep(time.Second) // ignores its context
					return 20, nil
				}
				return worker.Action(ctx, i, all)
			})
			f.Limit = 3
			f.Budget = 30 * time.Millisecond
			f.Join = AllSucceeded()
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
			require.NoError(t, each.Result().Err)
			synctest.Wait()
			for i := 1; i < 4; i++ {
				assert.True(t, s23Continued(nodes[i]), "item %d", i)
			}
			time.Sleep(2 * time.Second) // let item 2's worker return
		})
		if t.Failed() {
			return
		}
	}
}

// --- f130939: a ForEach's static shape in reports ---

// s23Gate is a start node that waits for release.
func s23Gate(release <-chan struct{}) *WorkerWrapper[int, int] {
	return NewWrapper("gate", WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
		select {
		case <-release:
			return i, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}), 1)
}

// s23Prices is a ForEach of 3 quick items with a Join, Limit 2 and a
// Budget.
func s23Prices() ForEach[int, int, int] {
	f := s23Each([]s23Item{{d: time.Millisecond}, {d: time.Millisecond}, {d: time.Millisecond}}, nil)
	f.Limit, f.Budget, f.Join = 2, 150*time.Millisecond, AtLeast(2)
	return f
}

// A snapshot of a timed run, taken while a ForEach waits for its
// upstream, has the static shape in every rendering: the pictures draw
// its box plain, the Chrome trace adds no process for it (nothing ran),
// CriticalPath and Err stay with the outer nodes.
func TestS23RSnapshotWithAStaticForEachRenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New(WithTimings(true))
		defer a.Close()
		release := make(chan struct{})
		gate := s23Gate(release)
		prices := NewWrapper("prices", s23Prices(), 0)
		prices.Depend(gate, true)
		run, err := a.Start(context.Background(), time.Minute, gate)
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond)
		rep := run.Report()
		sub := rep.Nodes[1].Sub
		require.NotNil(t, sub)
		require.Len(t, sub.Nodes, 2)
		assert.Equal(t, "gate: running\nprices: waiting limit=2 budget=150ms\n  each item: waiting\n  join: waiting\n", rep.String())
		dot := rep.DOT()
		assert.Contains(t, dot, `subgraph cluster_n1 {`)
		assert.Contains(t, dot, `n1_0 [label="each item"];`, "the static Sub is drawn plain")
		assert.Contains(t, dot, `n1_1 [label="join\nat least 2 succeeded"];`)
		assert.Contains(t, dot, `n0 [label="gate\nworking", fillcolor=`)
		mer := rep.Mermaid()
		assert.Contains(t, mer, `n1_0["each item"]`)
		assert.NotContains(t, mer, "n1_0,", "no class for a static node")
		assert.NotRegexp(t, `class .*n1_`, mer)
		var buf bytes.Buffer
		require.NoError(t, rep.WriteChromeTrace(&buf))
		require.True(t, json.Valid(buf.Bytes()))
		assert.NotContains(t, buf.String(), "sub-run of prices")
		assert.NotContains(t, buf.String(), "each item")
		assert.Nil(t, rep.CriticalPath(), "nothing has ended")
		assert.NoError(t, rep.Err())
		assert.NoError(t, sub.Err())
		assert.Nil(t, sub.CriticalPath())

		close(release)
		require.NoError(t, run.Wait(context.Background()))
		rep = run.Report()
		buf.Reset()
		require.NoError(t, rep.WriteChromeTrace(&buf))
		assert.Contains(t, buf.String(), "sub-run of prices")
		assert.Equal(t, []string{"0", "1", "2", "join"}, s23IDs(rep.Nodes[1].Sub))
	})
}

func s23IDs(rep *Report) []string {
	if rep == nil {
		return nil
	}
	var ids []string
	for _, n := range rep.Nodes {
		ids = append(ids, n.ID)
	}
	return ids
}

// A ForEach node that ended without starting a sub-run has no Sub: the
// run cancelled (or its deadline passed) before it started, its Items
// failed, it had no items, its Join could not fit the items. While its
// Items runs, the node shows the static shape.
func TestS23RNoSubWithoutASubRun(t *testing.T) {
	t.Run("cancelled before it started", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := New()
			defer a.Close()
			gate := s23Gate(make(chan struct{}))
			prices := NewWrapper("prices", s23Prices(), 0)
			prices.Depend(gate, true)
			run, err := a.Start(context.Background(), time.Minute, gate)
			require.NoError(t, err)
			time.Sleep(time.Millisecond)
			require.NotNil(t, run.Report().Nodes[1].Sub)
			run.Cancel()
			require.Error(t, run.Wait(context.Background()))
			rep := run.Report()
			assert.Nil(t, rep.Nodes[1].Sub)
			assert.Equal(t, StatusTimedOut, rep.Nodes[1].Status)
			assert.NotContains(t, rep.String(), "each item")
			assert.NotContains(t, rep.DOT(), "cluster")
		})
	})
	for _, c := range []struct {
		name  string
		items []int
		err   error
		join  Join
	}{
		{name: "items failed", err: errors.New("no list")},
		{name: "no items", items: []int{}},
		{name: "join does not fit", items: []int{1}, join: AtLeast(2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := New()
				defer a.Close()
				inItems := make(chan struct{})
				release := make(chan struct{})
				f := s23Prices()
				f.Join = c.join
				f.Items = func(context.Context, int, Wrappers) ([]int, error) {
					close(inItems)
					<-release
					return c.items, c.err
				}
				prices := NewWrapper("prices", f, 0)
				run, err := a.Start(context.Background(), time.Minute, prices)
				require.NoError(t, err)
				<-inItems
				rep := run.Report()
				assert.Equal(t, StatusRunning, rep.Nodes[0].Status)
				assert.Equal(t, []string{"each item"}, s23IDs(rep.Nodes[0].Sub)[:1], "the static shape while Items runs")
				close(release)
				_ = run.Wait(context.Background())
				assert.Nil(t, run.Report().Nodes[0].Sub)
			})
		})
	}
}

// A Hedged ForEach shows the static shape until a call starts its
// items, then the sub-run of the call that won.
func TestS23RHedgedForEachSnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		release := make(chan struct{})
		gate := s23Gate(release)
		f := s23Prices()
		prices := NewWrapper("prices", Hedged[int, []WorkResult[int]](f, 5*time.Millisecond, 2), 0)
		prices.Depend(gate, true)
		run, err := a.Start(context.Background(), time.Minute, gate)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		assert.Equal(t, []string{"each item", "join"}, s23IDs(run.Report().Nodes[1].Sub))
		assert.Equal(t, 150*time.Millisecond, run.Report().Nodes[1].Sub.Budget)
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, []string{"0", "1", "2", "join"}, s23IDs(run.Report().Nodes[1].Sub))
	})
}

// A ForEach in a SubPlan's plan: Describe nests the plan's shape, with
// the ForEach's own inside it, and a run's snapshot shows the same
// until the SubPlan starts; then the sub-run's ForEach shows its own
// static shape until it starts.
func TestS23RForEachInASubPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		inner := s23Gate(release)
		prices := NewWrapper("prices", s23Prices(), 0)
		prices.Depend(inner, true)
		pl, err := Compile(inner)
		require.NoError(t, err)
		outer := NewWrapper("page", SubPlan[int, []WorkResult[int]]{
			Plan:   pl,
			Output: prices.ValueIn,
		}, 0)
		rep, err := Describe(outer)
		require.NoError(t, err)
		want := "page: waiting\n  gate: waiting\n  prices: waiting limit=2 budget=150ms\n    each item: waiting\n    join: waiting\n"
		assert.Equal(t, want, rep.String())
		dot := rep.DOT()
		assert.Contains(t, dot, `subgraph cluster_n0_1 {`)
		assert.Contains(t, dot, `n0_1_0 [label="each item"];`)
		assert.Contains(t, dot, "n0_1 -> n0_1_0 [style=dotted, arrowhead=none];")
		assert.Contains(t, rep.Mermaid(), `subgraph cluster_n0_1 ["prices<br/>at most 2 at once, within 150ms"]`)

		a := New(WithTimings(true))
		defer a.Close()
		run, err := a.Start(context.Background(), time.Minute, outer)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		rep = run.Report()
		got := rep.String()
		assert.Contains(t, got, "  prices: waiting limit=2 budget=150ms\n    each item: waiting\n    join: waiting\n")
		var buf bytes.Buffer
		require.NoError(t, rep.WriteChromeTrace(&buf))
		assert.NotContains(t, buf.String(), "each item")
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		assert.Equal(t, []string{"0", "1", "2", "join"}, s23IDs(run.Report().Nodes[0].Sub.Nodes[1].Sub))
	})
}

// In a ForEach of ForEach nodes, the items kept back by the Limit show
// the inner ForEach's static shape in a snapshot; the static shape of
// the outer ForEach is one level deep ("each item" has no Sub of its
// own), which the docs promise.
func TestS23RForEachOfForEachShapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		release := make(chan struct{})
		inner := s23Prices()
		outerF := ForEach[int, int, []WorkResult[int]]{
			Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
			Worker: WorkerFunc[int, []WorkResult[int]](func(ctx context.Context, i int, all Wrappers) ([]WorkResult[int], error) {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return inner.Action(ctx, i, all)
			}),
			Limit: 1,
		}
		outerStatic := NewWrapper("outer", outerF, 0)
		rep, err := Describe(outerStatic)
		require.NoError(t, err)
		require.NotNil(t, rep.Nodes[0].Sub)
		assert.Nil(t, rep.Nodes[0].Sub.Nodes[0].Sub, "one level")

		blocked := inner
		items := inner.Items
		blocked.Items = func(ctx context.Context, p int, all Wrappers) ([]int, error) {
			<-release
			return items(ctx, p, all)
		}
		outerF.Worker = blocked // items that are ForEach nodes
		w := NewWrapper("outer", outerF, 0)
		run, err := a.Start(context.Background(), time.Minute, w)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		snap := run.Report().Nodes[0].Sub
		require.Equal(t, []string{"0", "1"}, s23IDs(snap))
		assert.Equal(t, StatusRunning, snap.Nodes[0].Status)
		assert.Equal(t, StatusReady, snap.Nodes[1].Status, "kept back by the Limit")
		for _, n := range snap.Nodes {
			assert.Equal(t, []string{"each item", "join"}, s23IDs(n.Sub), n.ID)
		}
		close(release)
		require.NoError(t, run.Wait(context.Background()))
		sub := run.Report().Nodes[0].Sub
		assert.Equal(t, []string{"0", "1"}, s23IDs(sub))
		for _, n := range sub.Nodes {
			assert.Equal(t, []string{"0", "1", "2", "join"}, s23IDs(n.Sub), n.ID)
		}
	})
}
