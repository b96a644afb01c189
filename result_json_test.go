package asynctool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWorkResultJSONRoundTrip(t *testing.T) {
	budget := fmt.Errorf("item 2: %w", &BudgetError{Budget: 70 * time.Millisecond})
	skipped := &UpstreamError{ID: "a", Err: ErrSkipped}
	cases := []struct {
		name    string
		in      WorkResult[int]
		json    string
		is, not []error
	}{
		{"success", WorkResult[int]{Value: 3, State: ResultSuccess},
			`{"Value":3,"State":1,"Err":null}`, nil, []error{context.Canceled}},
		{"budget", WorkResult[int]{Value: -1, State: ResultTimeout, Err: budget},
			`{"Value":-1,"State":2,"Err":{"Text":"item 2: asynctool: ForEach's Budget of 70ms ran out","Matches":["context.DeadlineExceeded"]}}`,
			[]error{context.DeadlineExceeded}, []error{context.Canceled, ErrSkipped}},
		{"upstream skipped", WorkResult[int]{State: ResultException, Err: skipped},
			`{"Value":0,"State":3,"Err":{"Text":"asynctool: upstream \"a\" failed: asynctool: skipped: no successor needs this node","Matches":["asynctool.ErrSkipped"]}}`,
			[]error{ErrSkipped}, []error{ErrNotTaken, context.DeadlineExceeded}},
		{"own error", WorkResult[int]{State: ResultException, Err: errors.New("no stock")},
			`{"Value":0,"State":3,"Err":{"Text":"no stock"}}`, nil, []error{ErrSkipped}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.in)
			require.NoError(t, err)
			assert.JSONEq(t, c.json, string(b))
			var back WorkResult[int]
			require.NoError(t, json.Unmarshal(b, &back))
			assert.Equal(t, c.in.Value, back.Value)
			assert.Equal(t, c.in.State, back.State)
			if c.in.Err == nil {
				assert.NoError(t, back.Err)
				return
			}
			require.Error(t, back.Err)
			assert.Equal(t, c.in.Err.Error(), back.Err.Error())
			for _, e := range c.is {
				assert.ErrorIs(t, back.Err, e)
			}
			for _, e := range c.not {
				assert.NotErrorIs(t, back.Err, e)
			}
			var be *BudgetError
			assert.False(t, errors.As(back.Err, &be), "the error's own type does not come back")
			again, err := json.Marshal(back)
			require.NoError(t, err)
			assert.JSONEq(t, string(b), string(again), "read back, stored again: the same")
		})
	}
}

// A ForEach's result, with items that failed and items its Budget
// stopped, goes through JSON (as the durable module checkpoints it) and
// keeps every item's value, state and error.
func TestForEachResultSurvivesJSON(t *testing.T) {
	a := New()
	defer a.Close()
	each := NewWrapper("each", ForEach[int, int, string]{
		Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1, 2}, nil },
		Worker: WorkerFunc[int, string](func(ctx context.Context, i int, _ Wrappers) (string, error) {
			switch i {
			case 1:
				return "", fmt.Errorf("sku %d: out of stock", i)
			case 2:
				<-ctx.Done()
				return "", ctx.Err()
			}
			return fmt.Sprint("price ", i), nil
		}),
		Node:   func(_ int, _ int, n *WorkerWrapper[int, string]) { n.Default("none") },
		Budget: 20 * time.Millisecond,
	}, 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
	res := each.Result()
	require.NoError(t, res.Err)
	b, err := json.Marshal(res.Value)
	require.NoError(t, err)
	var back []WorkResult[string]
	require.NoError(t, json.Unmarshal(b, &back), "%s", b)
	require.Len(t, back, 3)
	for i, r := range res.Value {
		assert.Equal(t, r.Value, back[i].Value, "item %d", i)
		assert.Equal(t, r.State, back[i].State, "item %d", i)
		if r.Err == nil {
			assert.NoError(t, back[i].Err, "item %d", i)
			continue
		}
		assert.EqualError(t, back[i].Err, r.Err.Error(), "item %d", i)
	}
	assert.Equal(t, "none", back[2].Value)
	assert.ErrorIs(t, back[2].Err, context.DeadlineExceeded, "the Budget's stop is still a timeout")
	assert.NotErrorIs(t, back[1].Err, context.DeadlineExceeded)
}

// A StoredError matches only the errors it names, and none that it
// does not know.
func TestStoredErrorMatchesWhatItNames(t *testing.T) {
	e := &StoredError{Text: "x", Matches: []string{"asynctool.ErrNotTaken"}}
	assert.ErrorIs(t, e, ErrNotTaken)
	assert.NotErrorIs(t, e, ErrSkipped)
	assert.NotErrorIs(t, e, errors.New("asynctool.ErrNotTaken"))
	var r WorkResult[int]
	assert.Error(t, json.Unmarshal([]byte(`{"Value":"x"}`), &r), "a value of another type")
}

// s23NilErr is an error type whose methods read their receiver.
type s23NilErr struct{ msg string }

func (e *s23NilErr) Error() string { return e.msg }
func (e *s23NilErr) Unwrap() error { return errors.New(e.msg) }

// A worker that returns a nil pointer as its error has a non-nil Err
// whose methods panic: its result still encodes, as "<nil>".
func TestWorkResultWithANilPointerErrorEncodes(t *testing.T) {
	var nilErr *s23NilErr
	r := WorkResult[int]{State: ResultException, Err: nilErr}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"Value":0,"State":3,"Err":{"Text":"<nil>"}}`, string(b))
}
