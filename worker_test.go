package asynctool

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type panickyDefaulter struct{}

func (panickyDefaulter) Action(context.Context, int, Wrappers) (int, error) { return 0, errBoom }

func (panickyDefaulter) DefaultValue() int { panic("bad default") }

func TestPanickingDefaulterDoesNotHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := New()
		defer a.Close()
		w := NewWrapper("w", Worker[int, int](panickyDefaulter{}), 0)
		err := a.BeginWork(context.Background(), 50*time.Millisecond, w)
		var cpe *CallbackPanicError
		require.ErrorAs(t, err, &cpe)
		assert.Equal(t, "DefaultValue", cpe.Method)
		assert.Equal(t, WorkResult[int]{State: ResultException, Err: errBoom}, w.Result(), "the zero value stands in")
	})
}
