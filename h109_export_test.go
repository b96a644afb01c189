package asynctool_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestH109ChromeTraceNamesAnonymousNodes: DOT and Mermaid show a node
// with the empty id as "#" and its index, but the Chrome trace named its
// event "" (two anonymous nodes could not be told apart in Perfetto), and
// an anonymous node's sub-run was the process "sub-run of " with events
// "/0", "/1". The trace now names them as the pictures do.
func TestH109ChromeTraceNamesAnonymousNodes(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	node := func(i int, id string, from, to int) asynctool.NodeReport {
		return asynctool.NodeReport{ID: id, Index: i, State: asynctool.StateFinish, Result: asynctool.ResultSuccess,
			Ran: true, Attempts: 1, Ready: ms(from), Started: ms(from), Ended: ms(to), Lane: 1}
	}
	sub := &asynctool.Report{Start: ms(0), End: ms(5), Nodes: []asynctool.NodeReport{node(0, "", 1, 2), node(1, "x", 2, 3)}}
	outer := node(1, "", 0, 5)
	outer.Sub = sub
	rep := &asynctool.Report{Start: t0, End: ms(5), Nodes: []asynctool.NodeReport{node(0, "", 0, 1), outer}}

	var buf bytes.Buffer
	require.NoError(t, rep.WriteChromeTrace(&buf))
	var names []string
	for _, e := range traceEvents(t, buf.Bytes(), "X") {
		names = append(names, e.Name)
	}
	assert.ElementsMatch(t, []string{"#0", "#1", "#1/#0", "#1/x"}, names)
	var processes []string
	for _, e := range traceEvents(t, buf.Bytes(), "M") {
		if e.Name == "process_name" {
			processes = append(processes, e.Args["name"].(string))
		}
	}
	assert.Equal(t, []string{"asynctool run", "sub-run of #1"}, processes)
	assert.Contains(t, rep.DOT(), `n1 [label="#1\n`, "the name the pictures give it")

	rep.Nodes[0].Started = time.Time{}
	assert.EqualError(t, rep.WriteChromeTrace(&buf), `asynctool: node "#0" ran but the report has no times for it; run with WithTimings or hooks`)
}

// TestH109ReportStringKeepsOneLinePerNode: Report.String promises one
// line per node, for logs, but wrote ids as they are: an id with a
// newline (a ForEach item named by ID after a SKU from a request, say)
// split its node's line in two, or forged another node's line, and a node
// with the empty id began with ": ". Such ids are quoted, and the empty
// one is "#" and the index, as in the pictures.
func TestH109ReportStringKeepsOneLinePerNode(t *testing.T) {
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

// TestH109DOTLongLabelsRender: Graphviz (2.43, Debian's) refuses a
// quoted string longer than 16384 bytes ("syntax error ... scanning a
// quoted string (missing endquote? longer than 16384?)"), and a label
// is that long for a node whose NamedSucceeded join names a few thousand
// upstreams, as its join is shown under its id. DOT now writes a long
// label as quoted strings of at most 4096 bytes joined with DOT's "+",
// which Graphviz reads as one.
func TestH109DOTLongLabelsRender(t *testing.T) {
	w := func(id string) *asynctool.WorkerWrapper[int, int] {
		return asynctool.NewWrapper(id, asynctool.WorkerFunc[int, int](
			func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil }), 0)
	}
	const n = 2000
	ids := make([]string, n)
	starts := make([]asynctool.Wrapper, n)
	sink := w("sink")
	for i := range ids {
		ids[i] = fmt.Sprintf("backend-%04d", i)
		up := w(ids[i])
		sink.Depend(up, true)
		starts[i] = up
	}
	sink.Join(asynctool.NamedSucceeded(ids...))
	rep, err := asynctool.Describe(starts...)
	require.NoError(t, err)
	join := rep.Nodes[len(rep.Nodes)-1].Join
	require.Greater(t, len(join), 16384, "the label is longer than Graphviz takes in one string")
	// A sub-report's box is labelled with its node's id.
	long := strings.Repeat("é", 9000)
	rep.Nodes[0].ID = long
	rep.Nodes[0].Sub = &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: long}}}

	dot := rep.DOT()
	for _, line := range strings.Split(dot, "\n") {
		for _, s := range strings.Split(line, `" + "`) {
			assert.LessOrEqual(t, len(s), 4200, "a quoted string of %d bytes", len(s))
		}
	}
	text := strings.ReplaceAll(renderSVG(t, dot), "&#45;", "-") // Graphviz escapes hyphens
	assert.Contains(t, text, xmlEscape(join), "the whole join, in one piece")
	assert.Equal(t, 3, strings.Count(text, ">"+long+"<"), "the id, whole, in the box's title and on both nodes")
}

// TestH109C1ControlsBecomeSpaces: DOT and Mermaid promise that control
// characters in a label become spaces, but only C0 ones and DEL did: a
// C1 control such as NEL (U+0085), which some decoders make of a
// Latin-1 byte, went through, and Graphviz dropped it, joining the words
// around it.
func TestH109C1ControlsBecomeSpaces(t *testing.T) {
	for _, c := range []string{"\u0085", "\u0080", "\u009f"} {
		rep := &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: "x" + c + "y"}}}
		assert.Contains(t, rep.DOT(), `n0 [label="x y"];`, "%q", c)
		assert.Contains(t, rep.Mermaid(), `n0["x y"]`, "%q", c)
	}
}
