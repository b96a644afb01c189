package asynctool

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoexitInOnRunEndIsReported checks that a runtime.Goexit in an
// OnRunEnd hook comes back from BeginWork as a *CallbackPanicError, as a
// panic there does, instead of being lost.
func TestGoexitInOnRunEndIsReported(t *testing.T) {
	for _, kind := range []string{"goexit", "panic"} {
		t.Run(kind, func(t *testing.T) {
			a := newAsync(t)
			h := &Hooks{OnRunEnd: func(context.Context, *Report) {
				if kind == "panic" {
					panic("boom")
				}
				runtime.Goexit()
			}}
			x := NewWrapper("x", okWorker(), 0)
			err := a.BeginWork(WithRunHooks(context.Background(), h), time.Minute, x)
			var cpe *CallbackPanicError
			require.ErrorAs(t, err, &cpe)
			assert.Equal(t, "OnRunEnd", cpe.Method)
			assert.Equal(t, ResultSuccess, x.Result().State, "the run itself went as it would have")
			if kind == "goexit" {
				assert.ErrorIs(t, err, ErrGoexit)
			}
		})
	}
}
