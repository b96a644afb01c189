package asynctool_test

import (
	"context"
	"fmt"
	"time"

	"github.com/asynctool-go/asynctool"
)

// A cache-or-database branch, compiled once: the lookup's value chooses
// which branch runs, the other is not taken, and the page, whose
// dependencies are both optional, runs on the branch that was taken.
func ExampleWhen() {
	type profile struct{ Name, From string }
	lookup := asynctool.NewWrapper("lookup", asynctool.WorkerFunc[string, bool](
		func(ctx context.Context, _ string, _ asynctool.Wrappers) (bool, error) {
			return ctx.Value(requestKey{}) == "ada", nil // a cache hit?
		}), "")
	cached := asynctool.NewWrapper("cached", asynctool.WorkerFunc[string, profile](
		func(ctx context.Context, _ string, _ asynctool.Wrappers) (profile, error) {
			return profile{ctx.Value(requestKey{}).(string), "cache"}, nil
		}), "").
		Depend(lookup, true).
		Join(asynctool.When("lookup", func(hit bool) bool { return hit }))
	fromDB := asynctool.NewWrapper("db", asynctool.WorkerFunc[string, profile](
		func(ctx context.Context, _ string, _ asynctool.Wrappers) (profile, error) {
			return profile{ctx.Value(requestKey{}).(string), "database"}, nil
		}), "").
		Depend(lookup, true).
		Join(asynctool.When("lookup", func(hit bool) bool { return !hit }))
	page := asynctool.NewWrapper("page", asynctool.WorkerFunc[string, string](
		func(_ context.Context, _ string, all asynctool.Wrappers) (string, error) {
			for _, id := range []string{"cached", "db"} {
				if p, err := asynctool.ResultOf[profile](all, id); err == nil && p.State == asynctool.ResultSuccess {
					return fmt.Sprintf("%s (from the %s)", p.Value.Name, p.Value.From), nil
				}
			}
			return "", fmt.Errorf("no profile")
		}), "").
		Depend(cached, false).Depend(fromDB, false)

	plan, err := asynctool.Compile(lookup)
	if err != nil {
		panic(err)
	}
	a := asynctool.New()
	defer a.Close()
	for _, user := range []string{"ada", "grace"} {
		run, err := a.RunPlan(context.WithValue(context.Background(), requestKey{}, user), plan, time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Println(page.ResultIn(run).Value)
		for _, n := range run.Report().Nodes {
			if n.Status == asynctool.StatusSkipped {
				fmt.Printf("  %s: %s\n", n.ID, n.Reason)
			}
		}
		run.Release()
	}
	// Output:
	// ada (from the cache)
	//   db: not taken: join when "lookup" decided so
	// grace (from the database)
	//   cached: not taken: join when "lookup" decided so
}

// A fallback: the backup price service is called only when the primary
// did not answer in time, and the quote takes whichever succeeded.
func ExampleWhenResult() {
	price := func(id string, d time.Duration, v int) *asynctool.WorkerWrapper[string, int] {
		return asynctool.NewWrapper(id, asynctool.WorkerFunc[string, int](
			func(ctx context.Context, _ string, _ asynctool.Wrappers) (int, error) {
				select {
				case <-time.After(d):
					return v, nil
				case <-ctx.Done():
					return 0, context.Cause(ctx)
				}
			}), "sku-1")
	}
	primary := price("primary", time.Hour, 100).Timeout(20 * time.Millisecond) // too slow today
	backup := price("backup", time.Millisecond, 101).
		Depend(primary, false).
		Join(asynctool.WhenResult("primary", func(r asynctool.WorkResult[int]) bool {
			// Failed or timed out; a primary not taken (had it been a
			// branch) would need no backup either. Its Err is then
			// ErrNotTaken itself: see WhenResult for why == and not
			// errors.Is.
			return r.Err != nil && r.Err != asynctool.ErrNotTaken
		}))
	quote := asynctool.NewWrapper("quote", asynctool.WorkerFunc[string, string](
		func(_ context.Context, _ string, all asynctool.Wrappers) (string, error) {
			for _, p := range []*asynctool.WorkerWrapper[string, int]{primary, backup} {
				if r, _ := p.ResultFrom(all); r.State == asynctool.ResultSuccess {
					return fmt.Sprintf("%d from the %s", r.Value, p.ID()), nil
				}
			}
			return "", fmt.Errorf("no price")
		}), "").
		Depend(primary, false).Depend(backup, false)

	a := asynctool.New()
	defer a.Close()
	_ = a.BeginWork(context.Background(), time.Minute, primary)
	fmt.Println(quote.Result().Value)
	fmt.Println("primary:", primary.Result().State)
	// Output:
	// 101 from the backup
	// primary: timeout
}
