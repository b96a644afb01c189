package asynctool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// resultNilErr is an error type whose methods read their receiver.
type resultNilErr struct{ msg string }

func (e *resultNilErr) Error() string { return e.msg }
func (e *resultNilErr) Unwrap() error { return errors.New(e.msg) }

// A worker that returns a nil pointer as its error has a non-nil Err
// whose methods panic: its result still encodes, as "<nil>". A nil
// *StoredError made MarshalJSON panic: it was taken for one read back,
// and its Text read through the nil pointer.
func TestWorkResultWithANilPointerErrorEncodes(t *testing.T) {
	for name, nilErr := range map[string]error{
		"*resultNilErr": (*resultNilErr)(nil),
		"*StoredError":  (*StoredError)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			r := WorkResult[int]{State: ResultException, Err: nilErr}
			var b []byte
			var err error
			require.NotPanics(t, func() { b, err = json.Marshal(r) })
			require.NoError(t, err)
			assert.JSONEq(t, `{"Value":0,"State":3,"Err":{"Text":"<nil>"}}`, string(b))
		})
	}
}

// resultCents encodes itself through pointer receivers, as many types do
// (*big.Int, for one): encoding/json calls them on an addressable value
// only.
type resultCents struct{ n int }

func (c *resultCents) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("%d cents", c.n))
}

func (c *resultCents) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	_, err := fmt.Sscanf(s, "%d cents", &c.n)
	return err
}

// TestValueWithPointerMarshalerRoundTrips: a result's Value encodes
// with its own pointer-receiver MarshalJSON, as it did in a slice before
// WorkResult had a MarshalJSON; MarshalJSON encoded its copy by value,
// so encoding/json wrote the value's fields ({}) and the decode failed.
func TestValueWithPointerMarshalerRoundTrips(t *testing.T) {
	items := []WorkResult[resultCents]{
		{Value: resultCents{250}, State: ResultSuccess},
		{Value: resultCents{-1}, State: ResultException, Err: errors.New("no price")},
	}
	b, err := json.Marshal(&items)
	require.NoError(t, err)
	assert.JSONEq(t, `[{"Value":"250 cents","State":1,"Err":null},{"Value":"-1 cents","State":3,"Err":{"Text":"no price"}}]`, string(b))
	var back []WorkResult[resultCents]
	require.NoError(t, json.Unmarshal(b, &back), "%s", b)
	assert.Equal(t, 250, back[0].Value.n)
	assert.Equal(t, -1, back[1].Value.n)

	one, err := json.Marshal(items[0]) // not addressable: MarshalJSON's copy is
	require.NoError(t, err)
	assert.JSONEq(t, `{"Value":"250 cents","State":1,"Err":null}`, string(one))
	nested, err := json.Marshal(WorkResult[WorkResult[resultCents]]{Value: items[0]})
	require.NoError(t, err)
	assert.Contains(t, string(nested), `"250 cents"`)
	// In a map, whose values are never addressable, and in a struct
	// passed by value.
	m := map[string]WorkResult[resultCents]{"a": items[0]}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	var mback map[string]WorkResult[resultCents]
	require.NoError(t, json.Unmarshal(b, &mback), "%s", b)
	assert.Equal(t, 250, mback["a"].Value.n)
	b, err = json.Marshal(struct{ R WorkResult[resultCents] }{items[0]})
	require.NoError(t, err)
	assert.JSONEq(t, `{"R":{"Value":"250 cents","State":1,"Err":null}}`, string(b))
}

// TestNullLeavesAResultAsItIs: JSON null decodes into a WorkResult as
// into any struct, leaving it as it is (encoding/json's convention for an
// UnmarshalJSON); it zeroed it.
func TestNullLeavesAResultAsItIs(t *testing.T) {
	r := WorkResult[int]{Value: 5, State: ResultSuccess}
	require.NoError(t, json.Unmarshal([]byte("null"), &r))
	assert.Equal(t, WorkResult[int]{Value: 5, State: ResultSuccess}, r)
	var s struct{ R WorkResult[int] }
	s.R = r
	require.NoError(t, json.Unmarshal([]byte(`{"R":null}`), &s))
	assert.Equal(t, r, s.R)
	// A decode that is not null replaces all of it, Err included.
	r.Err = ErrSkipped
	require.NoError(t, json.Unmarshal([]byte(`{"State":2}`), &r))
	assert.Equal(t, WorkResult[int]{State: ResultTimeout}, r)
}

// TestAStructEmbeddingAWorkResultEncodesAsIt documents what the
// MarshalJSON doc says: a struct embedding a WorkResult encodes as the
// WorkResult alone (its methods are promoted), as one embedding a
// time.Time does. Before WorkResult had them, its fields were inlined
// beside the struct's own.
func TestAStructEmbeddingAWorkResultEncodesAsIt(t *testing.T) {
	type priced struct {
		WorkResult[int]
		SKU string
	}
	b, err := json.Marshal(priced{WorkResult: WorkResult[int]{Value: 3, State: ResultSuccess}, SKU: "sku-7"})
	require.NoError(t, err)
	assert.NotContains(t, string(b), "sku-7")
	type named struct {
		Result WorkResult[int]
		SKU    string
	}
	b, err = json.Marshal(named{Result: WorkResult[int]{Value: 3, State: ResultSuccess}, SKU: "sku-7"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"Result":{"Value":3,"State":1,"Err":null},"SKU":"sku-7"}`, string(b))
}

// TestEveryExportedSentinelIsStored: a StoredError keeps its match
// with every sentinel error of the package (an item's error can wrap any
// of them: a SubGraph's *GraphError, a worker's ErrUnknownID from
// ResultOf or ErrPoolFull from a Pool), each under its own name; it kept
// only eleven, so that errors.Is(err, ErrDuplicateID) held on the first
// attempt and not on a replay.
func TestEveryExportedSentinelIsStored(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	want := map[string]string{} // name -> message, from the source
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for k, id := range vs.Names {
				if !id.IsExported() || !strings.HasPrefix(id.Name, "Err") || k >= len(vs.Values) {
					continue
				}
				call, ok := vs.Values[k].(*ast.CallExpr)
				if !ok || len(call.Args) != 1 {
					continue
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "New" {
					continue
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok {
					continue
				}
				msg, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				want["asynctool."+id.Name] = msg
			}
			return true
		})
	}
	require.Greater(t, len(want), 30)
	got := map[string]string{}
	for _, s := range storedSentinels {
		got[s.name] = s.err.Error()
	}
	for name, msg := range want {
		assert.Equal(t, msg, got[name], "%s is not stored under its name", name)
	}
	for _, s := range storedSentinels {
		if strings.HasPrefix(s.name, "asynctool.") {
			assert.Contains(t, want, s.name)
		}
		// Each comes back matching itself and nothing else.
		var back WorkResult[int]
		b, err := json.Marshal(WorkResult[int]{Err: fmt.Errorf("x: %w", s.err)})
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &back))
		for _, o := range storedSentinels {
			assert.Equal(t, o.err == s.err, errors.Is(back.Err, o.err), "%s stored, %s asked", s.name, o.name)
		}
	}
}

// TestForEachOfSubGraphsKeepsTheirGraphErrors: an item whose
// SubGraph builds a graph that does not compile fails with a *GraphError;
// its result, through JSON, still matches the sentinel.
func TestForEachOfSubGraphsKeepsTheirGraphErrors(t *testing.T) {
	a := New()
	defer a.Close()
	each := NewWrapper("each", ForEach[int, int, int]{
		Items: func(context.Context, int, Wrappers) ([]int, error) { return []int{0, 1}, nil },
		Worker: SubGraph[int, int]{Build: func(_ context.Context, i int, _ Wrappers) (Built[int], error) {
			x := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
			y := NewWrapper("x", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 1, nil }), 0)
			starts := []Wrapper{x}
			if i == 1 {
				starts = append(starts, y) // a duplicate id
			}
			return Built[int]{Starts: starts, Output: func() (int, error) { return x.Result().Value, nil }}, nil
		}},
	}, 0)
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, each))
	res := each.Result()
	require.NoError(t, res.Err)
	require.ErrorIs(t, res.Value[1].Err, ErrDuplicateID)
	b, err := json.Marshal(res.Value)
	require.NoError(t, err)
	var back []WorkResult[int]
	require.NoError(t, json.Unmarshal(b, &back))
	assert.EqualError(t, back[1].Err, res.Value[1].Err.Error())
	assert.ErrorIs(t, back[1].Err, ErrDuplicateID)
}

// TestStoredSentinelsAreKnownByName: a name stored by an older
// version, or one this version does not know, matches nothing.
func TestStoredSentinelsAreKnownByName(t *testing.T) {
	names := make([]string, 0, len(storedSentinels))
	for _, s := range storedSentinels {
		names = append(names, s.name)
	}
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), len(names), "no name twice")
	e := &StoredError{Text: "x", Matches: []string{"asynctool.ErrFromTheFuture"}}
	for _, s := range storedSentinels {
		assert.NotErrorIs(t, e, s.err)
	}
}

// TestANULInAMessageIsStoredAsFFFD: a NUL in an error's message,
// which JSON writes as \u0000 and PostgreSQL's jsonb refuses, is stored
// as U+FFFD, as bytes that are not UTF-8 are; nothing else changes.
func TestANULInAMessageIsStoredAsFFFD(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("reply %s: %w", "\x00ok", ErrJoinFailed),
		&StoredError{Text: "\x00", Matches: []string{"asynctool.ErrJoinFailed"}},
	} {
		b, e := json.Marshal(WorkResult[int]{State: ResultException, Err: err})
		require.NoError(t, e)
		assert.NotContains(t, string(b), `\u0000`)
		var back WorkResult[int]
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, strings.ReplaceAll(err.Error(), "\x00", "\uFFFD"), back.Err.Error())
		assert.ErrorIs(t, back.Err, ErrJoinFailed)
	}
}
