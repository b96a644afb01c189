package asynctool

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s23qCents encodes itself through pointer receivers, as many types do
// (*big.Int, for one): encoding/json calls them on an addressable value
// only.
type s23qCents struct{ n int }

func (c *s23qCents) MarshalJSON() ([]byte, error) { return json.Marshal(fmt.Sprintf("%d cents", c.n)) }
func (c *s23qCents) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	_, err := fmt.Sscanf(s, "%d cents", &c.n)
	return err
}

// TestS23QValueWithPointerMarshalerRoundTrips: a result's Value encodes
// with its own pointer-receiver MarshalJSON, as it did in a slice before
// WorkResult had a MarshalJSON; MarshalJSON encoded its copy by value,
// so encoding/json wrote the value's fields ({}) and the decode failed.
func TestS23QValueWithPointerMarshalerRoundTrips(t *testing.T) {
	items := []WorkResult[s23qCents]{
		{Value: s23qCents{250}, State: ResultSuccess},
		{Value: s23qCents{-1}, State: ResultException, Err: errors.New("no price")},
	}
	b, err := json.Marshal(&items)
	require.NoError(t, err)
	assert.JSONEq(t, `[{"Value":"250 cents","State":1,"Err":null},{"Value":"-1 cents","State":3,"Err":{"Text":"no price"}}]`, string(b))
	var back []WorkResult[s23qCents]
	require.NoError(t, json.Unmarshal(b, &back), "%s", b)
	assert.Equal(t, 250, back[0].Value.n)
	assert.Equal(t, -1, back[1].Value.n)

	one, err := json.Marshal(items[0]) // not addressable: MarshalJSON's copy is
	require.NoError(t, err)
	assert.JSONEq(t, `{"Value":"250 cents","State":1,"Err":null}`, string(one))
	nested, err := json.Marshal(WorkResult[WorkResult[s23qCents]]{Value: items[0]})
	require.NoError(t, err)
	assert.Contains(t, string(nested), `"250 cents"`)
}

// TestS23QNullLeavesAResultAsItIs: JSON null decodes into a WorkResult as
// into any struct, leaving it as it is (encoding/json's convention for an
// UnmarshalJSON); it zeroed it.
func TestS23QNullLeavesAResultAsItIs(t *testing.T) {
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

// TestS23QAStructEmbeddingAWorkResultEncodesAsIt documents what the
// MarshalJSON doc says: a struct embedding a WorkResult encodes as the
// WorkResult alone (its methods are promoted), as one embedding a
// time.Time does. Before WorkResult had them, its fields were inlined
// beside the struct's own.
func TestS23QAStructEmbeddingAWorkResultEncodesAsIt(t *testing.T) {
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
