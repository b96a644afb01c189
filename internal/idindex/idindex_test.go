package idindex

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestZeroIndexFindsNothing(t *testing.T) {
	var x Index
	_, ok := x.Lookup("a", func(int32) string { panic("no ids") })
	assert.False(t, ok)
}

func TestInsertLookup(t *testing.T) {
	ids := []string{"a", "b", "", "c"}
	idOf := func(p int32) string { return ids[p] }
	x := New(len(ids))
	for p, id := range ids {
		_, dup := x.Insert(id, int32(p), idOf)
		require.False(t, dup, id)
	}
	had, dup := x.Insert("b", 9, idOf)
	assert.True(t, dup)
	assert.Equal(t, int32(1), had, "a duplicate reports where the id already is")
	for p, id := range ids {
		got, ok := x.Lookup(id, idOf)
		require.True(t, ok, id)
		assert.Equal(t, int32(p), got, id)
	}
	_, ok := x.Lookup("d", idOf)
	assert.False(t, ok)
}

func TestFullIndexPanics(t *testing.T) {
	ids := make([]string, 9)
	for k := range ids {
		ids[k] = fmt.Sprint(k)
	}
	x := New(1) // 8 slots
	idOf := func(p int32) string { return ids[p] }
	for k := range 8 {
		x.Insert(ids[k], int32(k), idOf)
	}
	assert.PanicsWithValue(t, "idindex: Index is full", func() { x.Insert(ids[8], 8, idOf) })
}

// TestAgainstMap checks an Index against a map over random sets of ids,
// with many duplicates and collisions in small tables.
func TestAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		n := rng.IntN(200)
		ids := make([]string, n)
		for k := range ids {
			ids[k] = fmt.Sprint(rng.IntN(n + 1)) // about a third repeat an earlier id
		}
		idOf := func(p int32) string { return ids[p] }
		x := New(n)
		want := make(map[string]int32)
		for p, id := range ids {
			had, dup := x.Insert(id, int32(p), idOf)
			w, ok := want[id]
			require.Equal(t, ok, dup, "round %d: %q", round, id)
			if ok {
				require.Equal(t, w, had, "round %d: %q", round, id)
				continue
			}
			want[id] = int32(p)
		}
		for k := range n + 5 {
			id := fmt.Sprint(k)
			got, ok := x.Lookup(id, idOf)
			w, wok := want[id]
			require.Equal(t, wok, ok, "round %d: %q", round, id)
			require.Equal(t, w, got, "round %d: %q", round, id)
		}
	}
}

func TestInsertIntoZeroIndexPanics(t *testing.T) {
	var x Index
	assert.PanicsWithValue(t, "idindex: Insert on an Index not made by New", func() {
		x.Insert("a", 0, func(int32) string { return "a" })
	})
}
