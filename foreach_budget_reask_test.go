package asynctool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A custom join that decided (DecideFail, DecideSkip, or a panic) on an
// item the Budget stopped stands: the node fails as the join decided,
// rather than succeed because the join, asked on every item ended, would
// answer DecideRun (a re-ask after the sub-run's end did that). Items 2
// and 3 return well after ctx.Done, so the sweep ends
// them in order: the join decides on item 2's end, with item 3 not
// ended.
func TestForEachBudgetCustomJoinDecisionIsNotAskedAgain(t *testing.T) {
	for name, early := range map[string]func() Decision{
		"fail":  func() Decision { return DecideFail },
		"skip":  func() Decision { return DecideSkip },
		"panic": func() Decision { panic("two items failed") },
	} {
		t.Run(name, func(t *testing.T) {
			a := New()
			defer a.Close()
			f := ForEach[int, int, int]{
				Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2, 3}, nil },
				Worker: WorkerFunc[int, int](func(ctx context.Context, i int, _ Wrappers) (int, error) {
					switch i {
					case 0:
						return 0, errors.New("item 0")
					case 1:
						return 1, nil
					}
					<-ctx.Done()
					time.Sleep(20 * time.Millisecond) // the sweep ends it first
					return i, nil
				}),
				Budget: 30 * time.Millisecond,
				// Fail early once two items failed; go on with what
				// arrived once every item has ended.
				Join: CustomJoin(func(ups []Upstream) Decision {
					ended, failed := 0, 0
					for _, u := range ups {
						if u.Ended {
							ended++
							if !u.OK {
								failed++
							}
						}
					}
					if ended == len(ups) {
						return DecideRun
					}
					if failed >= 2 {
						return early()
					}
					return DecideWait
				}),
			}
			each := NewWrapper("each", f, 0)
			require.NoError(t, a.BeginWork(context.Background(), 10*time.Second, each))
			assert.Error(t, each.Result().Err, "the join decided %s on items 0 and 2", name)
		})
	}
}
