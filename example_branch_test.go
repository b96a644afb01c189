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
