package idindex

import (
	"strings"
	"testing"
)

// FuzzS18GIndex checks an Index against a map: inserts (with repeats,
// the empty id and long ids sharing a prefix) report duplicates and their
// positions as the map does, and lookups of ids in and out of the Index
// agree, up to a full table.
func FuzzS18GIndex(f *testing.F) {
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
