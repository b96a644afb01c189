package asynctool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type typedNilValueWorker struct{ n int }

func (w typedNilValueWorker) Action(context.Context, int, Wrappers) (int, error) { return w.n, nil }

type typedNilPointerWorker struct{ n int }

func (w *typedNilPointerWorker) Action(context.Context, int, Wrappers) (int, error) {
	if w == nil {
		return 42, nil // a worker without state works as a nil *T
	}
	return w.n, nil
}

// TestTypedNilWorkers pins what NewWrapper's doc says of a nil
// pointer of a user's worker type: it is not refused (a nil interface
// is, with ErrNilWorker), since a pointer receiver's Action may be
// called on nil; one with a value receiver panics when called, which
// fails its node only, with a *PanicError that names the nil pointer.
func TestTypedNilWorkers(t *testing.T) {
	a := newAsync(t)
	var v *typedNilValueWorker
	var p *typedNilPointerWorker
	x := NewWrapper[int, int]("x", v, 0)
	y := NewWrapper[int, int]("y", p, 0)
	r, err := a.Start(context.Background(), time.Minute, x, y)
	require.NoError(t, err, "a typed nil worker is not refused")
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, WorkResult[int]{Value: 42, State: ResultSuccess}, y.ResultIn(r))
	var pe *PanicError
	require.ErrorAs(t, x.ResultIn(r).Err, &pe)
	assert.Contains(t, pe.Error(), "typedNilValueWorker.Action called using nil *typedNilValueWorker pointer")
	assert.Equal(t, "worker panicked", r.Report().Nodes[0].Reason)

	var nilIface Worker[int, int]
	err = a.BeginWork(context.Background(), time.Minute, NewWrapper("z", nilIface, 0))
	assert.ErrorIs(t, err, ErrNilWorker)
}
