// Package idindex maps string ids to int32 positions with open
// addressing. It stores only the positions, four bytes a slot, and asks
// its caller for the id at a position when a probe needs to compare: the
// caller already keeps every id, so a map[string]int32, which would keep
// a second copy of each string header beside its value, costs several
// times the memory and allocations of an Index.
package idindex

import (
	"hash/maphash"
	"math/bits"
)

// Index maps ids to positions. The zero Index is empty: Lookup finds
// nothing in it and Insert panics; New makes one with room.
type Index struct {
	seed  maphash.Seed
	slots []int32 // position+1, 0 for an empty slot
	mask  uint64
}

// New returns an empty Index with room for n ids. Its table has at least
// twice as many slots as ids, so probes stay short.
func New(n int) Index { return In(make([]int32, Slots(n))) }

// Slots returns the size of the table New(n) makes: a power of two, at
// least 8 and at least twice n.
func Slots(n int) int {
	if n > 2 {
		return 1 << bits.Len(uint(2*n-1))
	}
	return 8
}

// In returns an empty Index whose table is slots, for a caller that
// allocates it with other arrays. slots must be zeroed, and its length a
// power of two; Slots(n) gives the length that holds n ids as New's does.
func In(slots []int32) Index {
	if len(slots) == 0 || len(slots)&(len(slots)-1) != 0 {
		panic("idindex: table length not a power of two")
	}
	return Index{seed: maphash.MakeSeed(), slots: slots, mask: uint64(len(slots) - 1)}
}

// Insert adds id at pos, unless the Index already has id: then it leaves
// the Index as it was and returns the position id has. idOf returns the
// id at a position that was inserted before. Insert panics when every
// slot is taken, which takes more than twice the ids New made room for.
func (x *Index) Insert(id string, pos int32, idOf func(int32) string) (had int32, dup bool) {
	if len(x.slots) == 0 {
		panic("idindex: Insert on an Index not made by New")
	}
	h := maphash.String(x.seed, id)
	for k := uint64(0); k <= x.mask; k++ {
		s := &x.slots[(h+k)&x.mask]
		if *s == 0 {
			*s = pos + 1
			return 0, false
		}
		if idOf(*s-1) == id {
			return *s - 1, true
		}
	}
	panic("idindex: Index is full")
}

// Lookup returns the position of id, and false if the Index does not
// have it.
func (x *Index) Lookup(id string, idOf func(int32) string) (int32, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	h := maphash.String(x.seed, id)
	for k := uint64(0); k <= x.mask; k++ {
		p := x.slots[(h+k)&x.mask]
		if p == 0 {
			return 0, false
		}
		if idOf(p-1) == id {
			return p - 1, true
		}
	}
	return 0, false
}
