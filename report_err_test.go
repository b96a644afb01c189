package asynctool

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Report.Err names each failed node as String does: an anonymous one by
// "#" and its index, not as node "", which two anonymous nodes share.
func TestReportErrNamesAnonymousNodes(t *testing.T) {
	rep := &Report{Nodes: []NodeReport{
		{ID: "a", Index: 0, Err: errBoom},
		{ID: "", Index: 1, Err: errBoom},
		{ID: "", Index: 2, Err: errors.New("other")},
	}}
	assert.Equal(t, "node \"a\": boom\nnode #1: boom\nnode #2: other", rep.Err().Error())
	assert.ErrorIs(t, rep.Err(), errBoom)
}
