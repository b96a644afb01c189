package asynctool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamedSucceededCopiesItsIDs checks that NamedSucceeded keeps its own
// copy of the ids: a caller that reuses its slice afterwards (a loop that
// builds several joins from one buffer) used to change the join.
func TestNamedSucceededCopiesItsIDs(t *testing.T) {
	a := newAsync(t)
	fail := WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, errors.New("down") })
	good := NewWrapper("good", okWorker(), 0)
	bad := NewWrapper("bad", fail, 0)
	ids := []string{"good"}
	x := NewWrapper("x", okWorker(), 0).Depend(good, false).Depend(bad, false).Join(NamedSucceeded(ids...))
	ids[0] = "bad" // reused by the caller
	require.NoError(t, a.BeginWork(context.Background(), time.Minute, good, bad))
	assert.Equal(t, ResultSuccess, x.Result().State, "x waits on good, as it was told when the join was made")
	names := []string{"good"}
	j := NamedSucceeded(names...)
	before := j.String()
	names[0] = "bad"
	assert.Equal(t, before, j.String(), "a join's name does not change with the caller's slice")
}
