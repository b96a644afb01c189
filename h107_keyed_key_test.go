package asynctool

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH107KeyedRefusesUnhashableKey: a Keyed[any] (or a key type with an
// interface field) compiles with a key that holds a slice, map or func,
// which Go cannot hash: Submit panicked with the runtime's "hash of
// unhashable type", where a NaN key, the other key that cannot work, gets
// ErrNaNKey. It now gets ErrUnhashableKey, leaves nothing behind, and the
// Keyed goes on taking good keys.
func TestH107KeyedRefusesUnhashableKey(t *testing.T) {
	type wrapped struct {
		id  string
		any any
	}
	k := NewKeyed[any](nil)
	kw := NewKeyed[wrapped](nil)
	ran := false
	task := func() { ran = true }
	for name, submit := range map[string]func() error{
		"slice":           func() error { return k.Submit([]int{1}, task) },
		"map":             func() error { return k.Submit(map[string]int{}, task) },
		"func":            func() error { return k.Submit(func() {}, task) },
		"struct of slice": func() error { return k.Submit(wrapped{"a", []int{1}}, task) },
		"field of map":    func() error { return kw.Submit(wrapped{"a", map[int]int{}}, task) },
	} {
		var err error
		require.NotPanics(t, func() { err = submit() }, name)
		assert.ErrorIs(t, err, ErrUnhashableKey, name)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	require.NoError(t, k.Submit("u1", wg.Done))
	require.NoError(t, kw.Submit(wrapped{"a", 1}, wg.Done))
	wg.Wait()
	k.Close()
	kw.Close()
	assert.False(t, ran, "a refused task ran")
	for _, st := range []SerialStats{k.Stats(), kw.Stats()} {
		assert.Equal(t, uint64(1), st.Completed)
		assert.Zero(t, st.Keys)
	}
}
