package asynctool_test

import (
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
)

// TestReportStringKeepsOneLinePerNode: Report.String promises one
// line per node, for logs, but wrote ids as they are: an id with a
// newline (a ForEach item named by ID after a SKU from a request, say)
// split its node's line in two, or forged another node's line, and a node
// with the empty id began with ": ". Such ids are quoted, and the empty
// one is "#" and the index, as in the pictures.
func TestReportStringKeepsOneLinePerNode(t *testing.T) {
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
		{ID: "", Index: 0, Status: asynctool.StatusSucceeded},
		{ID: "sku\nforged: succeeded", Index: 1, Status: asynctool.StatusFailed},
		{ID: "tab\there", Index: 2, Status: asynctool.StatusSkipped, DecidedBy: "sku\nforged: succeeded"},
		{ID: "plain é", Index: 3, Status: asynctool.StatusSucceeded},
	}}
	assert.Equal(t, "#0: succeeded\n"+
		`"sku\nforged: succeeded": failed`+"\n"+
		`"tab\there": skipped by="sku\nforged: succeeded"`+"\n"+
		"plain é: succeeded\n", rep.String())
}
