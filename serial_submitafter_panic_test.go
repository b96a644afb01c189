package asynctool

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSubmitAfterPanickingExecutorEndsTheProgram pins what the
// Executor doc says of a Submit that panics on a timer's goroutine: a
// Serial's delayed task, once due, starts the drain loop from its timer,
// and the executor's panic, which no caller can take there, ends the
// program (ff66a05 kept the Serial working for a panic on a Submit's
// caller, which gets it). The child process is this test, run again.
func TestSubmitAfterPanickingExecutorEndsTheProgram(t *testing.T) {
	if os.Getenv("ASYNCTOOL_SUBMITAFTER_CHILD") == "1" {
		s := NewSerial(ExecutorFunc(func(func()) error { panic("executor closed") }))
		if _, err := s.SubmitAfter(time.Millisecond, func() {}); err != nil {
			os.Exit(3)
		}
		time.Sleep(10 * time.Second) // the timer's panic ends the process first
		os.Exit(4)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSubmitAfterPanickingExecutorEndsTheProgram$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ASYNCTOOL_SUBMITAFTER_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 2, exit.ExitCode(), "a panic's exit status: %s", out)
	assert.Contains(t, string(out), "panic: executor closed")
	assert.Contains(t, string(out), "(*delayedTask).fire", "on the timer's goroutine")
}
