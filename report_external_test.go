package asynctool_test

import (
	"context"
	"errors"
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
)

// TestReportStringKeepsOneLinePerNode: Report.String promises one
// line per node, for logs, but wrote ids as they are: an id with a
// newline (a ForEach item named by ID after a SKU from a request, say)
// split its node's line in two, or forged another node's line, and a node
// with the empty id began with ": ". Such ids are quoted, and the empty
// one is "#" and the index, as in the pictures. A reason that holds a
// worker's error, and the run's error, were written as they are too:
// errors.Join's error (a worker's, pending, or Wait's, which joins the
// callbacks' panics) split the line in two, and the second half, in a
// sub-run's report, read as a line of the outer report. They are quoted
// when they hold a newline, or another character that is not printable,
// such as the carriage return of a progress message, which a terminal
// shows by writing over the start of the line.
func TestReportStringKeepsOneLinePerNode(t *testing.T) {
	sub := &asynctool.Report{
		Nodes: []asynctool.NodeReport{{ID: "item", Index: 0, Status: asynctool.StatusPending,
			Reason: "pending after x failed\nfallback: waiting for Resume"}},
		RunErr: errors.Join(context.Canceled, errors.New("done: succeeded")),
	}
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
		{ID: "", Index: 0, Status: asynctool.StatusSucceeded},
		{ID: "sku\nforged: succeeded", Index: 1, Status: asynctool.StatusFailed},
		{ID: "tab\there", Index: 2, Status: asynctool.StatusSkipped, DecidedBy: "sku\nforged: succeeded"},
		{ID: "plain é", Index: 3, Status: asynctool.StatusSucceeded, Reason: "plain reason"},
		{ID: "cr", Index: 4, Status: asynctool.StatusFailed, Reason: "progress 50%\rfailed at 60%"},
		{ID: "each", Index: 5, Status: asynctool.StatusRunning, Sub: sub},
	}}
	assert.Equal(t, "#0: succeeded\n"+
		`"sku\nforged: succeeded": failed`+"\n"+
		`"tab\there": skipped by="sku\nforged: succeeded"`+"\n"+
		"plain é: succeeded (plain reason)\n"+
		`cr: failed ("progress 50%\rfailed at 60%")`+"\n"+
		"each: running\n"+
		`  item: pending ("pending after x failed\nfallback: waiting for Resume")`+"\n"+
		`  run: "context canceled\ndone: succeeded"`+"\n", rep.String())
}

// TestReportStringIDsThatReadAsSomethingElse: an id that starts with '#'
// read as an anonymous node's name ("#0: succeeded" for node "#0" and for
// anonymous node 0), one that starts with spaces as a sub-run's node, one
// with ": " as a shorter id with another status, and one that starts
// with '"' as a quoted id, and one that is not UTF-8 as whatever a
// reader shows for its bytes (U+FFFD, for "\xff" and "\xfe" alike). Such
// ids are quoted.
func TestReportStringIDsThatReadAsSomethingElse(t *testing.T) {
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
		{ID: "", Index: 0, Status: asynctool.StatusSucceeded},
		{ID: "#0", Index: 1, Status: asynctool.StatusFailed},
		{ID: "  sub", Index: 2, Status: asynctool.StatusSucceeded},
		{ID: "a: failed", Index: 3, Status: asynctool.StatusSucceeded, DecidedBy: "#0"},
		{ID: `"q"`, Index: 4, Status: asynctool.StatusSucceeded},
		{ID: "a:b #c", Index: 5, Status: asynctool.StatusSucceeded},
		{ID: "\xff", Index: 6, Status: asynctool.StatusSucceeded, DecidedBy: "\xfe"},
	}}
	assert.Equal(t, "#0: succeeded\n"+
		`"#0": failed`+"\n"+
		`"  sub": succeeded`+"\n"+
		`"a: failed": succeeded by="#0"`+"\n"+
		`"\"q\"": succeeded`+"\n"+
		"a:b #c: succeeded\n"+
		`"\xff": succeeded by="\xfe"`+"\n", rep.String())
}
