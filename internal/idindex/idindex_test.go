package idindex

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"
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

// TestFullIndexPanics checks that an Index takes an id in every slot,
// the last free one too, finds each id in the full table, and panics
// only on one id more. The ids all hash to one slot, so that the last
// Insert and the Lookups of the last id and of one not in the table
// probe every slot.
func TestFullIndexPanics(t *testing.T) {
	x := New(1) // 8 slots
	var ids []string
	home := uint64(0)
	for k := 0; len(ids) < 9; k++ {
		id := fmt.Sprint(k)
		h := maphash.String(x.seed, id) & x.mask
		if len(ids) == 0 {
			home = h
		}
		if h == home {
			ids = append(ids, id)
		}
	}
	idOf := func(p int32) string { return ids[p] }
	for k := range 8 {
		_, dup := x.Insert(ids[k], int32(k), idOf)
		require.False(t, dup, ids[k])
	}
	for k := range 8 {
		got, ok := x.Lookup(ids[k], idOf)
		require.True(t, ok, "%s in slot %d of its probe", ids[k], k)
		assert.Equal(t, int32(k), got, ids[k])
	}
	_, ok := x.Lookup(ids[8], idOf)
	assert.False(t, ok, "an id not in the full table")
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

// TestInUsesTheCallersTable checks that an Index made by In on a table
// the caller allocated works as one made by New, in that table, and
// that In refuses a table whose length is not a power of two.
func TestInUsesTheCallersTable(t *testing.T) {
	ids := []string{"a", "b", "c"}
	idOf := func(p int32) string { return ids[p] }
	for n, want := range map[int]int{0: 8, 1: 8, 2: 8, 3: 8, 4: 8, 5: 16, 8: 16, 9: 32} {
		assert.Equal(t, want, Slots(n), "Slots(%d)", n)
	}
	block := make([]int32, 2+Slots(len(ids)))
	x := In(block[2:])
	for p, id := range ids {
		_, dup := x.Insert(id, int32(p), idOf)
		require.False(t, dup, id)
	}
	for p, id := range ids {
		got, ok := x.Lookup(id, idOf)
		require.True(t, ok, id)
		assert.Equal(t, int32(p), got, id)
	}
	assert.Equal(t, []int32{0, 0}, block[:2], "the Index writes only its own part of the block")
	filled := 0
	for _, s := range block[2:] {
		if s != 0 {
			filled++
		}
	}
	assert.Equal(t, len(ids), filled, "the ids are in the caller's table")
	assert.PanicsWithValue(t, "idindex: table length not a power of two", func() { In(make([]int32, 12)) })
	assert.PanicsWithValue(t, "idindex: table length not a power of two", func() { In(nil) })
}

// FuzzIndex checks an Index against a map: inserts (with repeats,
// the empty id and long ids sharing a prefix) report duplicates and their
// positions as the map does, and lookups of ids in and out of the Index
// agree, up to a full table.
func FuzzIndex(f *testing.F) {
	f.Add(uint8(3), []byte("abcabc"))
	f.Add(uint8(0), []byte{0, 0, 1, 255, 254})
	f.Add(uint8(40), []byte(strings.Repeat("\x01\x02\x03\x81\x82", 20)))
	f.Fuzz(func(t *testing.T, room uint8, ops []byte) {
		long := strings.Repeat("p", 300)
		idFor := func(b byte) string {
			switch {
			case b == 0:
				return ""
			case b&0x80 != 0:
				return long + string(rune('a'+b%26)) // long, shared prefix
			default:
				return string(rune('a' + b%40))
			}
		}
		var ids []string
		idOf := func(p int32) string { return ids[p] }
		x := New(int(room))
		slots := Slots(int(room))
		want := map[string]int32{}
		for _, b := range ops {
			id := idFor(b)
			if b&0x40 != 0 { // a lookup
				got, ok := x.Lookup(id, idOf)
				w, wok := want[id]
				if ok != wok || got != w {
					t.Fatalf("Lookup(%q) = %d, %v; want %d, %v", id, got, ok, w, wok)
				}
				continue
			}
			if _, ok := want[id]; !ok && len(want) == slots {
				continue // full: Insert would panic, as documented
			}
			pos := int32(len(ids))
			ids = append(ids, id)
			had, dup := x.Insert(id, pos, idOf)
			w, wok := want[id]
			if dup != wok || dup && had != w {
				t.Fatalf("Insert(%q) = %d, %v; want %d, %v", id, had, dup, w, wok)
			}
			if !wok {
				want[id] = pos
			}
		}
		for id, w := range want {
			if got, ok := x.Lookup(id, idOf); !ok || got != w {
				t.Fatalf("Lookup(%q) = %d, %v; want %d", id, got, ok, w)
			}
		}
	})
}
