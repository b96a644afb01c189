package asynctool_test

import (
	"context"
	"fmt"
	"time"

	"github.com/asynctool-go/asynctool"
)

// userKey carries a user id to the workers of a plan.
type userKey struct{}

// A profile sub-graph (name and avatar in parallel, then a card) is
// compiled once and used as one node of a page's graph: its Input hands
// the user id from the node's upstream to the sub-plan's workers through
// the context, its Output reads the card (ValueIn). The run's report
// shows the sub-run inside the node.
func ExampleSubPlan() {
	a := asynctool.New()
	defer a.Close()

	// The sub-plan, compiled once at start-up.
	uid := func(ctx context.Context) int64 { return ctx.Value(userKey{}).(int64) }
	name := asynctool.NewWrapper("name", asynctool.WorkerFunc[struct{}, string](
		func(ctx context.Context, _ struct{}, _ asynctool.Wrappers) (string, error) {
			return fmt.Sprintf("user %d", uid(ctx)), nil // an RPC, in real life
		}), struct{}{})
	avatar := asynctool.NewWrapper("avatar", asynctool.WorkerFunc[struct{}, string](
		func(ctx context.Context, _ struct{}, _ asynctool.Wrappers) (string, error) {
			return fmt.Sprintf("/img/%d.png", uid(ctx)), nil
		}), struct{}{})
	card := asynctool.NewWrapper("card", asynctool.WorkerFunc[struct{}, string](
		func(_ context.Context, _ struct{}, all asynctool.Wrappers) (string, error) {
			n, _ := name.ResultFrom(all)
			a, _ := avatar.ResultFrom(all)
			return n.Value + " " + a.Value, nil
		}), struct{}{}).Depend(name, true).Depend(avatar, true)
	profilePlan, err := asynctool.Compile(name, avatar)
	if err != nil {
		panic(err)
	}

	// A request's graph, with the sub-plan as its node "profile".
	session := asynctool.NewWrapper("session", asynctool.WorkerFunc[string, int64](
		func(context.Context, string, asynctool.Wrappers) (int64, error) {
			return 42, nil // the user id of the session token
		}), "token")
	profile := asynctool.NewWrapper("profile", asynctool.SubPlan[string, string]{
		Plan: profilePlan,
		Input: func(ctx context.Context, _ string, all asynctool.Wrappers) (context.Context, error) {
			s, err := asynctool.ResultOf[int64](all, "session")
			return context.WithValue(ctx, userKey{}, s.Value), err
		},
		Output: card.ValueIn, // the card's value and error in the sub-run
	}, "").Depend(session, true)

	run, err := a.Start(context.Background(), time.Second, session)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Wait(context.Background()), profile.Result().Value)
	for _, n := range run.Report().Nodes {
		fmt.Println(n.ID, n.Status)
		if n.Sub != nil {
			for _, s := range n.Sub.Nodes {
				fmt.Println("  ", s.ID, s.Status)
			}
		}
	}
	// Output:
	// <nil> user 42 /img/42.png
	// session succeeded
	// profile succeeded
	//    name succeeded
	//    avatar succeeded
	//    card succeeded
}
