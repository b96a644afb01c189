package asynctool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errDown = errors.New("down")

// handReport is a finished run built by hand, so that the exports are
// exact: ids with quotes, spaces, a backslash and Unicode; every outcome;
// must and optional edges. Times are milliseconds after t0.
//
//	user (0-10) ─┐
//	cart "v2" (0-30) ─┤ must
//	récos ✨ (skipped) ┄┘ optional ──> page (30-45) ──> audit\log (45-47, fails) ──> mail (never ran)
//	ads (0-40, timeout)
func handReport() *asynctool.Report {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	ran := func(i int, id string, from, to float64, lane int, st asynctool.State, res asynctool.ResultState, err error) asynctool.NodeReport {
		return asynctool.NodeReport{ID: id, Index: i, State: st, Result: res, Err: err, Ran: true, Attempts: 1,
			Ready: ms(from), Started: ms(from), Ended: ms(to), Lane: lane}
	}
	nodes := []asynctool.NodeReport{
		ran(0, "user", 0, 10, 1, asynctool.StateFinish, asynctool.ResultSuccess, nil),
		ran(1, `cart "v2"`, 0, 30, 2, asynctool.StateFinish, asynctool.ResultSuccess, nil),
		{ID: "récos ✨", Index: 2, State: asynctool.StateError, Result: asynctool.ResultException,
			Err: asynctool.ErrSkipped, Reason: "no successor needed it any more", Ended: ms(5)},
		ran(3, "ads", 0, 40, 3, asynctool.StateError, asynctool.ResultTimeout, context.DeadlineExceeded),
		ran(4, "page", 30, 45, 2, asynctool.StateFinish, asynctool.ResultSuccess, nil),
		ran(5, `audit\log`, 45, 47, 2, asynctool.StateError, asynctool.ResultException, errDown),
		{ID: "mail", Index: 6, State: asynctool.StateError, Result: asynctool.ResultException,
			Err: &asynctool.UpstreamError{ID: `audit\log`, Err: errDown}, Reason: `must upstream "audit\\log" failed`,
			DecidedBy: `audit\log`, Ended: ms(47)},
	}
	nodes[3].Reason = "stopped while running: context deadline exceeded"
	nodes[4].Deps, nodes[4].Must = []int{0, 1, 2}, []bool{true, true, false}
	nodes[4].Ready, nodes[4].Attempts = ms(30), 2
	nodes[5].Deps, nodes[5].Must = []int{4}, []bool{true}
	nodes[5].Reason = "worker failed"
	nodes[6].Deps, nodes[6].Must = []int{5}, []bool{true}
	return &asynctool.Report{Nodes: nodes, Start: t0, End: ms(47)}
}

func TestCriticalPath(t *testing.T) {
	rep := handReport()
	// audit\log ends last among the nodes that ran; before it, page; before
	// page, cart (30ms) outweighs user (10ms); récos never ran.
	assert.Equal(t, []int{1, 4, 5}, rep.CriticalPath())

	// Without times there is no critical path.
	for i := range rep.Nodes {
		rep.Nodes[i].Started, rep.Nodes[i].Ended = time.Time{}, time.Time{}
	}
	assert.Nil(t, rep.CriticalPath())
	assert.Nil(t, (&asynctool.Report{}).CriticalPath())

	// Two dependencies whose chains weigh the same: the tie goes to the
	// one listed first in Deps.
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, deps := range [][]int{{0, 1}, {1, 0}} {
		tie := &asynctool.Report{Start: t0, Nodes: []asynctool.NodeReport{
			{ID: "a", Index: 0, Ran: true, Started: ms(0), Ended: ms(10)},
			{ID: "b", Index: 1, Ran: true, Started: ms(0), Ended: ms(10)},
			{ID: "c", Index: 2, Ran: true, Started: ms(10), Ended: ms(20), Deps: deps, Must: []bool{true, true}},
		}}
		assert.Equal(t, []int{deps[0], 2}, tie.CriticalPath(), "deps %v", deps)
	}

	// Two nodes end in the same last instant: the path ends at the one
	// whose chain weighs the most (b, 20ms, against a then c, 5 + 10ms),
	// wherever it is in Nodes; of two that weigh the same, the first.
	sameEnd := &asynctool.Report{Start: t0, Nodes: []asynctool.NodeReport{
		{ID: "a", Index: 0, Ran: true, Started: ms(0), Ended: ms(5)},
		{ID: "c", Index: 1, Ran: true, Started: ms(10), Ended: ms(20), Deps: []int{0}, Must: []bool{true}},
		{ID: "b", Index: 2, Ran: true, Started: ms(0), Ended: ms(20)},
		{ID: "d", Index: 3, Ran: true, Started: ms(0), Ended: ms(20)},
	}}
	assert.Equal(t, []int{2}, sameEnd.CriticalPath())
}

// TestCriticalPathEndsWhereTheRunEnded: a run that ends with its EndsRun
// node, or by a node's PolicyEnd failure, stops an optional branch still
// running, which so ends last, in the instant the run ended. That branch
// did not hold the run (nothing waited for it), so the path is the one
// to the node that ended the run, not the stopped branch, which
// CriticalPath gave before, and Mermaid and DOT drew thick: shortening it
// would not have made the run faster.
func TestCriticalPathEndsWhereTheRunEnded(t *testing.T) {
	sleep := func(id string, d time.Duration, err error) *asynctool.WorkerWrapper[int, int] {
		return asynctool.NewWrapper(id, asynctool.WorkerFunc[int, int](
			func(ctx context.Context, _ int, _ asynctool.Wrappers) (int, error) {
				select {
				case <-time.After(d):
					return 1, err
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}), 0)
	}
	for _, tc := range []struct {
		name  string
		build func() (starts []asynctool.Wrapper)
		want  []string
	}{{
		name: "EndsRun",
		build: func() []asynctool.Wrapper {
			user := sleep("user", 10*time.Millisecond, nil)
			recs := sleep("recs", time.Hour, nil)
			sleep("page", time.Millisecond, nil).Depend(user, true).Depend(recs, false).EndsRun()
			return []asynctool.Wrapper{user, recs}
		},
		want: []string{"user", "page"},
	}, {
		name: "PolicyEnd",
		build: func() []asynctool.Wrapper {
			auth := sleep("auth", 10*time.Millisecond, errDown).OnFailure(asynctool.PolicyEnd)
			recs := sleep("recs", time.Hour, nil)
			sleep("page", time.Millisecond, nil).Depend(auth, true).Depend(recs, false)
			return []asynctool.Wrapper{recs, auth}
		},
		want: []string{"auth"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := asynctool.New(asynctool.WithTimings(true))
				defer a.Close()
				r, err := a.Start(context.Background(), 0, tc.build()...)
				require.NoError(t, err)
				_ = r.Wait(context.Background())
				rep := r.Report()

				idx := map[string]int{}
				for _, n := range rep.Nodes {
					idx[n.ID] = n.Index
				}
				last := idx[tc.want[len(tc.want)-1]]
				require.True(t, rep.Nodes[idx["recs"]].Ran)
				require.Equal(t, rep.Nodes[last].Ended, rep.Nodes[idx["recs"]].Ended, "recs was stopped as the run ended")
				require.Less(t, idx["recs"], last, "of nodes ending together and weighing the same, the first would win")
				var want []int
				for _, id := range tc.want {
					want = append(want, idx[id])
				}
				assert.Equal(t, want, rep.CriticalPath())
			})
		})
	}
}

const handDOT = `digraph asynctool {
  rankdir=LR;
  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];
  edge [fontname="Helvetica"];
  n0 [label="user\nsuccess 10ms", fillcolor="#a6d96a"];
  n1 [label="cart \"v2\"\nsuccess 30ms", fillcolor="#a6d96a"];
  n2 [label="récos ✨\nskipped", fillcolor="#d9d9d9"];
  n3 [label="ads\ntimeout 40ms", fillcolor="#fdae61"];
  n4 [label="page\nsuccess 15ms ×2", fillcolor="#a6d96a"];
  n5 [label="audit\\log\nexception 2ms", fillcolor="#f4a582"];
  n6 [label="mail\nexception", fillcolor="#f4a582"];
  n0 -> n4;
  n1 -> n4 [style=bold, penwidth=3];
  n2 -> n4 [style=dashed];
  n4 -> n5 [style=bold, penwidth=3];
  n5 -> n6;
}
`

const handMermaid = `flowchart LR
  n0["user<br/>success 10ms"]
  n1["cart #quot;v2#quot;<br/>success 30ms"]
  n2["récos ✨<br/>skipped"]
  n3["ads<br/>timeout 40ms"]
  n4["page<br/>success 15ms ×2"]
  n5["audit\log<br/>exception 2ms"]
  n6["mail<br/>exception"]
  n0 --> n4
  n1 ==> n4
  n2 -.-> n4
  n4 ==> n5
  n5 --> n6
  classDef finish fill:#a6d96a,stroke:#333
  class n0,n1,n4 finish
  classDef skipped fill:#d9d9d9,stroke:#333
  class n2 skipped
  classDef timeout fill:#fdae61,stroke:#333
  class n3 timeout
  classDef exception fill:#f4a582,stroke:#333
  class n5,n6 exception
`

func TestExportGolden(t *testing.T) {
	rep := handReport()
	assert.Equal(t, handDOT, rep.DOT())
	assert.Equal(t, handMermaid, rep.Mermaid())
}

// TestExportEscaping checks labels that would break either format if they
// were pasted in as they are.
func TestExportEscaping(t *testing.T) {
	tests := []struct {
		id, dot, mermaid string
	}{
		{`a"b`, `"a\"b"`, `"a#quot;b"`},
		{`a\b`, `"a\\b"`, `"a\b"`},
		{`\N`, `"\\N"`, `"\N"`},
		{"two\nlines", `"two\nlines"`, `"two lines"`},
		{"tab\there", `"tab here"`, `"tab here"`},
		{"<b>&#1;`x`", `"<b>&amp;#1;` + "`x`" + `"`, `"#lt;b#gt;#amp;#35;1;#96;x#96;"`},
		{"日本 ✓", `"日本 ✓"`, `"日本 ✓"`},
		{"", `"#0"`, `"#35;0"`},
		// Quoted, so as not to read as the node without an id above, a
		// quoted id, or any other bytes that are not UTF-8.
		{"#0", `"\"#0\""`, `"#quot;#35;0#quot;"`},
		{`"x"`, `"\"\\\"x\\\"\""`, `"#quot;\#quot;x\#quot;#quot;"`},
		{"\xff", `"\"\\xff\""`, `"#quot;\xff#quot;"`},
		{"end", `"end"`, `"end"`},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			rep := &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: tt.id}}}
			assert.Contains(t, rep.DOT(), "  n0 [label="+tt.dot+"];\n")
			assert.Contains(t, rep.Mermaid(), "  n0["+tt.mermaid+"]\n")
		})
	}
}

// Mermaid reads "%%{" anywhere in its text as a directive, and "%%" at
// the start of a line as a comment, and its JavaScript takes U+2028 and
// U+2029 for line ends: an id "x\u2028%%y" made the rest of its line a
// comment, and one that holds "%%{" a directive, so the diagram did not
// parse (as Mermaid's parser showed). Every % is now an entity code,
// those two characters spaces, in a node's label and a box's title.
func TestMermaidEscapesPercentsAndLineSeparators(t *testing.T) {
	for id, want := range map[string]string{
		"x\u2028%%y":          "x #37;#37;y",
		"a\u2029b":            "a b",
		"%%{init: {}}%% x":    "#37;#37;{init: {}}#37;#37; x",
		"100% done":           "100#37; done",
		"%%{subgraph\u2028)|": "#37;#37;{subgraph )|",
	} {
		rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
			{ID: id, Sub: &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: id}}}},
		}}
		m := rep.Mermaid()
		assert.Contains(t, m, `  subgraph cluster_n0 ["`+want+`"]`+"\n", "%q", id)
		assert.Contains(t, m, `    n0["`+want+`"]`+"\n", "%q", id)
		assert.Contains(t, m, `    n0_0["`+want+`"]`+"\n", "%q", id)
		assert.NotContains(t, m, "%", "%q", id)
		assert.NotContains(t, m, "\u2028", "%q", id)
		assert.NotContains(t, m, "\u2029", "%q", id)
	}
}

// describeGraph builds a graph with every kind of edge and returns its
// static report.
func describeGraph(t *testing.T) *asynctool.Report {
	t.Helper()
	w := func(id string) *asynctool.WorkerWrapper[int, int] {
		return asynctool.NewWrapper(id, asynctool.WorkerFunc[int, int](
			func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil }), 0)
	}
	a, b := w("a"), w(`b "quoted"`)
	w("c").Depend(a, true).Depend(b, false)
	rep, err := asynctool.Describe(a, b)
	require.NoError(t, err)
	return rep
}

func TestExportStatic(t *testing.T) {
	rep := describeGraph(t)
	assert.Equal(t, `digraph asynctool {
  rankdir=LR;
  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];
  edge [fontname="Helvetica"];
  n0 [label="a"];
  n1 [label="b \"quoted\""];
  n2 [label="c"];
  n0 -> n2;
  n1 -> n2 [style=dashed];
}
`, rep.DOT())
	assert.Equal(t, `flowchart LR
  n0["a"]
  n1["b #quot;quoted#quot;"]
  n2["c"]
  n0 --> n2
  n1 -.-> n2
`, rep.Mermaid())
	assert.Nil(t, rep.CriticalPath())
	var buf bytes.Buffer
	require.NoError(t, rep.WriteChromeTrace(&buf))
	assert.Empty(t, traceEvents(t, buf.Bytes(), "X"), "nothing ran")
}

type traceEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

// traceEvents parses a trace and returns its events of phase ph.
func traceEvents(t *testing.T, data []byte, ph string) []traceEvent {
	t.Helper()
	var trace struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(data, &trace), "got %s", data)
	var out []traceEvent
	for _, e := range trace.TraceEvents {
		if e.Ph == ph {
			out = append(out, e)
		}
	}
	return out
}

func TestChromeTrace(t *testing.T) {
	rep := handReport()
	var buf bytes.Buffer
	require.NoError(t, rep.WriteChromeTrace(&buf))
	data := buf.Bytes()

	complete := traceEvents(t, data, "X")
	ran := 0
	for _, n := range rep.Nodes {
		if n.Ran {
			ran++
		}
	}
	require.Len(t, complete, ran, "one complete event per node that ran")
	byName := map[string]traceEvent{}
	for _, e := range complete {
		_, dup := byName[e.Name]
		require.False(t, dup, "one event for %q", e.Name)
		byName[e.Name] = e
	}
	page := byName["page"]
	assert.Equal(t, 30000.0, page.Ts, "µs from the run's start")
	assert.Equal(t, 15000.0, page.Dur)
	assert.Equal(t, 2, page.Tid, "tid is the lane")
	assert.Equal(t, "success", page.Args["result"])
	assert.Equal(t, 2.0, page.Args["attempts"])
	assert.Equal(t, `cart "v2"`, byName[`cart "v2"`].Name)
	assert.Equal(t, "down", byName[`audit\log`].Args["error"])

	// Nodes that ended without running are instant events on track 0.
	instants := traceEvents(t, data, "i")
	names := []string{}
	for _, e := range instants {
		assert.Equal(t, 0, e.Tid)
		names = append(names, e.Name)
	}
	assert.ElementsMatch(t, []string{"récos ✨", "mail"}, names)
	assert.Equal(t, 47000.0, instants[1].Ts)

	// Every track in use is named.
	tracks := map[int]string{}
	for _, e := range traceEvents(t, data, "M") {
		if e.Name == "thread_name" {
			tracks[e.Tid] = e.Args["name"].(string)
		}
	}
	assert.Equal(t, map[int]string{0: "not run", 1: "lane 1", 2: "lane 2", 3: "lane 3"}, tracks)

	// The run's process is there even when none of its nodes ran or ended
	// (a static report): a trace with no process would not say it is the
	// run's.
	buf.Reset()
	require.NoError(t, (&asynctool.Report{Nodes: []asynctool.NodeReport{{ID: "x"}}}).WriteChromeTrace(&buf))
	meta := traceEvents(t, buf.Bytes(), "M")
	require.Len(t, meta, 1, "%s", buf.Bytes())
	assert.Equal(t, "process_name", meta[0].Name)
	assert.Equal(t, 1, meta[0].Pid)
	assert.Equal(t, "asynctool run", meta[0].Args["name"])
}

func TestChromeTraceNeedsTimes(t *testing.T) {
	rep := handReport()
	rep.Nodes[0].Started = time.Time{}
	var buf bytes.Buffer
	assert.ErrorContains(t, rep.WriteChromeTrace(&buf), `node "user" ran but the report has no times`)
	assert.Zero(t, buf.Len(), "nothing written")
}

// nilPointerError is an error type whose Error reads its receiver, so
// that a nil *nilPointerError, returned as an error, panics when asked.
type nilPointerError struct{ msg string }

func (e *nilPointerError) Error() string { return e.msg }

// A worker that returns a typed nil as its error fails its node with an
// error whose Error method panics. String and Err print it as fmt does;
// WriteChromeTrace called the method itself and panicked, where it now
// writes the trace with the error as fmt prints it.
func TestChromeTraceOfAnErrorWhoseMethodPanics(t *testing.T) {
	a := asynctool.New(asynctool.WithTimings(true))
	defer a.Close()
	w := asynctool.NewWrapper("w", asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) {
		var e *nilPointerError
		return 0, e
	}), 0)
	run, err := a.Start(context.Background(), time.Minute, w)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	rep := run.Report()
	require.Equal(t, asynctool.StatusFailed, rep.Nodes[0].Status)
	var buf bytes.Buffer
	require.NotPanics(t, func() { require.NoError(t, rep.WriteChromeTrace(&buf)) })
	var trace struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &trace))
	var got []any
	for _, e := range trace.TraceEvents {
		if e.Name == "w" {
			got = append(got, e.Args["error"])
		}
	}
	assert.Equal(t, []any{fmt.Sprint(rep.Nodes[0].Err)}, got)
}

// TestExportRun exports a real run under fake time, where durations are
// exact.
func TestExportRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := asynctool.New(asynctool.WithTimings(true))
		defer a.Close()
		sleep := func(id string, d time.Duration, err error) *asynctool.WorkerWrapper[int, int] {
			return asynctool.NewWrapper(id, asynctool.WorkerFunc[int, int](
				func(context.Context, int, asynctool.Wrappers) (int, error) { time.Sleep(d); return 1, err }), 0)
		}
		user := sleep("user", 10*time.Millisecond, nil)
		cart := sleep("cart", 30*time.Millisecond, nil)
		page := sleep("page", 5*time.Millisecond, nil).Depend(user, true).Depend(cart, true)
		sleep("log", time.Millisecond, errDown).Depend(page, false)
		r, err := a.Start(context.Background(), time.Second, user, cart)
		require.NoError(t, err)
		require.NoError(t, r.Wait(context.Background()))
		rep := r.Report()

		idx := map[string]int{}
		for _, n := range rep.Nodes {
			idx[n.ID] = n.Index
		}
		assert.Equal(t, []int{idx["cart"], idx["page"], idx["log"]}, rep.CriticalPath())
		m := rep.Mermaid()
		assert.Contains(t, m, `["cart<br/>success 30ms"]`)
		assert.Contains(t, m, `["page<br/>success 5ms"]`)
		assert.Contains(t, m, `["log<br/>exception 1ms"]`)
		assert.Contains(t, rep.DOT(), `[style="dashed,bold", penwidth=3]`, "page -> log is optional and critical")

		var buf bytes.Buffer
		require.NoError(t, rep.WriteChromeTrace(&buf))
		complete := traceEvents(t, buf.Bytes(), "X")
		require.Len(t, complete, 4)
		for _, e := range complete {
			n := rep.Nodes[idx[e.Name]]
			assert.Equal(t, n.Lane, e.Tid)
			assert.Equal(t, float64(n.Started.Sub(rep.Start).Microseconds()), e.Ts)
			assert.Equal(t, float64(n.Duration().Microseconds()), e.Dur)
		}
	})
}

// renderSVG renders dot with Graphviz (dot -Tsvg), failing the test on
// an error or a warning. Without dot on PATH it skips the test, or, when
// CI is set (CI installs graphviz), fails it.
func renderSVG(t *testing.T, dot string) string {
	t.Helper()
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("dot not found on PATH, and CI is set: .ci/run must install graphviz: %v", err)
		}
		t.Skip("dot (graphviz) not on PATH")
	}
	cmd := exec.Command("dot", "-Tsvg")
	cmd.Stdin = strings.NewReader(dot)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	svg, err := cmd.Output()
	require.NoError(t, err, "dot failed: %.500s\n%.2000s", stderr.String(), dot)
	assert.Empty(t, stderr.String(), "dot warnings")
	return string(svg)
}

// TestDOTRenders feeds the exports to Graphviz. It needs dot on PATH; CI
// installs it, so there a missing dot is a failure, not a skip.
func TestDOTRenders(t *testing.T) {
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("dot not found on PATH, and CI is set: .ci/run must install graphviz: %v", err)
		}
		t.Skip("dot (graphviz) not on PATH")
	}
	weird := &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: `q"uo\te` + "\n{x} [y]; <z> -> ✨"}, {ID: "", Index: 1, Deps: []int{0}, Must: []bool{false}}}}
	for name, rep := range map[string]*asynctool.Report{"run": handReport(), "static": describeGraph(t), "weird": weird} {
		t.Run(name, func(t *testing.T) {
			svg := renderSVG(t, rep.DOT())
			assert.Contains(t, svg, "<svg")
			for _, n := range rep.Nodes {
				if n.ID != "" {
					// Graphviz writes each label line as a text element.
					first := strings.SplitN(n.ID, "\n", 2)[0]
					assert.Contains(t, svg, xmlEscape(first))
				}
			}
		})
	}
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestChromeTraceNamesAnonymousNodes: DOT and Mermaid show a node
// with the empty id as "#" and its index, but the Chrome trace named its
// event "" (two anonymous nodes could not be told apart in Perfetto), and
// an anonymous node's sub-run was the process "sub-run of " with events
// "/0", "/1". The trace now names them as the pictures do.
func TestChromeTraceNamesAnonymousNodes(t *testing.T) {
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

	// An id the trace quotes is not quoted again: it read
	// "\"a/b\"" (the id "a/b", which a path would split).
	rep.Nodes[0].ID = "a/b"
	assert.EqualError(t, rep.WriteChromeTrace(&buf), `asynctool: node "a/b" ran but the report has no times for it; run with WithTimings or hooks`)
}

// TestChromeTraceNamesAreUnambiguous: a sub-run's events are named by
// the path of ids that leads to them, joined with "/", and an anonymous
// node by "#" and its index. An id "a/b" of the outer run was then named
// as node "b" of the sub-run of node "a", and an id "#1" as the outer
// run's anonymous node 1: two different nodes, one name, and the same
// for their sub-runs' processes. JSON turned every byte of an id that is
// not UTF-8 into U+FFFD, so ids "\xff" and "\xfe" were both named "\ufffd".
// Such ids are now quoted in the trace.
func TestChromeTraceNamesAreUnambiguous(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	node := func(i int, id string, from, to int) asynctool.NodeReport {
		return asynctool.NodeReport{ID: id, Index: i, State: asynctool.StateFinish, Result: asynctool.ResultSuccess,
			Ran: true, Attempts: 1, Ready: ms(from), Started: ms(from), Ended: ms(to), Lane: 1}
	}
	withSub := func(n asynctool.NodeReport, sub ...asynctool.NodeReport) asynctool.NodeReport {
		n.Sub = &asynctool.Report{Start: n.Started, End: n.Ended, Nodes: sub}
		return n
	}
	rep := &asynctool.Report{Start: t0, End: ms(10), Nodes: []asynctool.NodeReport{
		withSub(node(0, "a", 0, 2), withSub(node(0, "b", 0, 1), node(0, "c", 0, 1))),
		withSub(node(1, "a/b", 2, 4), node(0, "c", 2, 3)),
		withSub(node(2, "", 4, 6), node(0, "x", 4, 5)),
		withSub(node(3, "#2", 6, 8), node(0, "x", 6, 7)),
		node(4, `"q"`, 8, 9),
		node(5, "\xff", 9, 10),
		node(6, "\xfe", 9, 10),
	}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteChromeTrace(&buf))
	var names []string
	for _, e := range traceEvents(t, buf.Bytes(), "X") {
		names = append(names, e.Name)
	}
	assert.ElementsMatch(t, []string{
		"a", "a/b", "a/b/c",
		`"a/b"`, `"a/b"/c`,
		"#2", "#2/x",
		`"#2"`, `"#2"/x`,
		`"\"q\""`,
		`"\xff"`, `"\xfe"`,
	}, names)
	var processes []string
	for _, e := range traceEvents(t, buf.Bytes(), "M") {
		if e.Name == "process_name" {
			processes = append(processes, e.Args["name"].(string))
		}
	}
	assert.ElementsMatch(t, []string{"asynctool run", "sub-run of a", "sub-run of a/b", `sub-run of "a/b"`, "sub-run of #2", `sub-run of "#2"`}, processes)
}

// TestDOTLongLabelsRender: Graphviz (2.43, Debian's) refuses a
// quoted string longer than 16384 bytes ("syntax error ... scanning a
// quoted string (missing endquote? longer than 16384?)"), and a label
// is that long for a node whose NamedSucceeded join names a few thousand
// upstreams, as its join is shown under its id. DOT now writes a long
// label as quoted strings of at most 4096 bytes joined with DOT's "+",
// which Graphviz reads as one.
func TestDOTLongLabelsRender(t *testing.T) {
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
	split := 0
	for _, line := range strings.Split(dot, "\n") {
		pieces := strings.Split(line, `" + "`)
		if len(pieces) == 1 {
			continue
		}
		split++
		// The quoted strings' contents: the first starts after label=",
		// the last ends at its closing quote.
		_, pieces[0], _ = strings.Cut(pieces[0], `label="`)
		last := pieces[len(pieces)-1]
		pieces[len(pieces)-1] = last[:strings.LastIndex(last, `"`)]
		for _, s := range pieces {
			assert.LessOrEqual(t, len(s), 4096, "a quoted string of %d bytes", len(s))
		}
	}
	assert.Equal(t, 4, split, "the join's label, and the long id's box and nodes")
	text := strings.ReplaceAll(renderSVG(t, dot), "&#45;", "-") // Graphviz escapes hyphens
	assert.Contains(t, text, xmlEscape(join), "the whole join, in one piece")
	assert.Equal(t, 3, strings.Count(text, ">"+long+"<"), "the id, whole, in the box's title and on both nodes")
}

// TestC1ControlsBecomeSpaces: DOT and Mermaid promise that control
// characters in a label become spaces, but only C0 ones and DEL did: a
// C1 control such as NEL (U+0085), which some decoders make of a
// Latin-1 byte, went through, and Graphviz dropped it, joining the words
// around it.
func TestC1ControlsBecomeSpaces(t *testing.T) {
	for _, c := range []string{"\u0085", "\u0080", "\u009f"} {
		rep := &asynctool.Report{Nodes: []asynctool.NodeReport{{ID: "x" + c + "y"}}}
		assert.Contains(t, rep.DOT(), `n0 [label="x y"];`, "%q", c)
		assert.Contains(t, rep.Mermaid(), `n0["x y"]`, "%q", c)
	}
}

// TestDOTLabelKeepsAmpersands: Graphviz reads HTML entities in quoted
// labels, so a node id holding one ("R&amp;D", "&#65;") was drawn as
// another text ("R&D", "A"), and "&#1;" put a control character into
// the SVG, which no XML parser then accepts. dotQuote now escapes '&'.
func TestDOTLabelKeepsAmpersands(t *testing.T) {
	ids := []string{"R&amp;D", "x&#65;y", "ctl&#1;", "sur&#xD800;", "a & b", "&"}
	var nodes []asynctool.NodeReport
	for k, id := range ids {
		nodes = append(nodes, asynctool.NodeReport{ID: id, Index: k})
	}
	rep := &asynctool.Report{Nodes: nodes}
	dot := rep.DOT()
	assert.Contains(t, dot, `n0 [label="R&amp;amp;D"];`)

	svg := renderSVG(t, dot)
	for _, id := range ids {
		// Graphviz writes each label as a text element, XML-escaped.
		assert.True(t, strings.Contains(svg, ">"+xmlEscape(id)+"</text>"), "id %q not drawn as it is:\n%s", id, svg)
	}
	assert.False(t, strings.ContainsRune(svg, 1), "a control character in the SVG")
}

// TestDecidedByAnAnonymousUpstream: a node whose join an upstream without
// an id decided has an empty DecidedBy, as the field's doc says; String
// and the Chrome trace name that upstream "#" and its index, where they
// left it out, as they do for a start node that nothing decided.
func TestDecidedByAnAnonymousUpstream(t *testing.T) {
	a := asynctool.New(asynctool.WithTimings(true))
	defer a.Close()
	work := asynctool.WorkerFunc[int, int](func(context.Context, int, asynctool.Wrappers) (int, error) { return 1, nil })
	up := asynctool.NewWrapper("", work, 0)
	down := asynctool.NewWrapper("down", work, 0).Depend(up, true)
	r, err := a.Start(context.Background(), time.Second, up)
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
	rep := r.Report()
	n := rep.Nodes[1]
	require.Equal(t, down.ID(), n.ID)
	assert.Empty(t, n.DecidedBy)
	assert.Regexp(t, `\ndown: succeeded .* by=#0\n`, rep.String())
	var buf bytes.Buffer
	require.NoError(t, rep.WriteChromeTrace(&buf))
	decided := map[string]any{}
	for _, e := range traceEvents(t, buf.Bytes(), "X") {
		decided[e.Name] = e.Args["decided_by"]
	}
	assert.Equal(t, map[string]any{"#0": nil, "down": "#0"}, decided)
}

// TestExportOfAHandBuiltReportWithoutMust: a report built by hand, as a
// test's fixture, that sets Deps and not Must panicked in DOT and Mermaid
// (index out of range). The edges Must leaves out are drawn as optional.
func TestExportOfAHandBuiltReportWithoutMust(t *testing.T) {
	rep := &asynctool.Report{Nodes: []asynctool.NodeReport{
		{ID: "a", Index: 0},
		{ID: "b", Index: 1, Deps: []int{0}},
	}}
	assert.Contains(t, rep.DOT(), "n0 -> n1 [style=dashed];")
	assert.Contains(t, rep.Mermaid(), "n0 -.-> n1")
}

// TestPicturesTellWhatTheEngineStoredFromAWorkersError checks that a
// branch not taken is drawn grey, "not taken", while a worker that
// returned ErrNotTaken or ErrSkipped (an upstream's error passed on)
// failed, and is drawn red, "exception", as its Report says: the engine
// stores the sentinels as they are and wraps a worker's.
func TestPicturesTellWhatTheEngineStoredFromAWorkersError(t *testing.T) {
	fails := func(id string, err error) *asynctool.WorkerWrapper[int, int] {
		return asynctool.NewWrapper(id, asynctool.WorkerFunc[int, int](
			func(context.Context, int, asynctool.Wrappers) (int, error) { return 0, err }), 0)
	}
	check := func(rep *asynctool.Report, id, word, color string) {
		t.Helper()
		var n *asynctool.NodeReport
		for i := range rep.Nodes {
			if rep.Nodes[i].ID == id {
				n = &rep.Nodes[i]
			}
		}
		require.NotNil(t, n, id)
		label := id
		if n.Join != "" {
			label += "<br/>" + strings.ReplaceAll(n.Join, `"`, "#quot;")
		}
		assert.Contains(t, rep.Mermaid(), fmt.Sprintf("  n%d[\"%s<br/>%s\"]\n", n.Index, label, word), id)
		assert.Regexp(t, fmt.Sprintf(`(?m)^  n%d \[label=".*", fillcolor="%s"\];$`, n.Index, color), rep.DOT(), id)
	}

	route := asynctool.NewWrapper("route", asynctool.WorkerFunc[int, string](
		func(context.Context, int, asynctool.Wrappers) (string, error) { return "db", nil }), 0)
	fails("cache", nil).Depend(route, true).Join(asynctool.When("route", func(v string) bool { return v == "cache" }))
	a := asynctool.New()
	defer a.Close()
	r, err := a.Start(context.Background(), time.Minute,
		route, fails("passed-not-taken", asynctool.ErrNotTaken), fails("passed-skipped", asynctool.ErrSkipped))
	require.NoError(t, err)
	_ = r.Wait(context.Background()) // the passed-on errors fail their nodes
	rep := r.Report()
	check(rep, "cache", "not taken", "#d9d9d9")
	check(rep, "passed-not-taken", "exception", "#f4a582")
	check(rep, "passed-skipped", "exception", "#f4a582")
}
