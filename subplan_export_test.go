package asynctool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errThumbDown = errors.New("down")

// subplanHand is a finished run with sub-reports, built by hand so that the
// exports are exact. Times are milliseconds after t0.
//
//	user (0-10) ──> profile (10-40) ──> page (40-45) ┄┄> audit (skipped)
//	                 │                                     │
//	                 ├ name (12-20) ──> card (30-38)       └ x ──> y (static)
//	                 └ avatar (12-30) ─┘
//	                    │
//	                    └ cdn (13-20) ┄┄> thumb (20-29, fails)
func subplanHand() *Report {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	ran := func(i int, id string, from, to float64, lane int) NodeReport {
		return NodeReport{ID: id, Index: i, Status: StatusSucceeded, State: StateFinish, Result: ResultSuccess,
			Ran: true, Attempts: 1, Ready: ms(from), Started: ms(from), Ended: ms(to), Lane: lane}
	}
	dep := func(n NodeReport, must bool, deps ...int) NodeReport {
		n.Deps = deps
		for range deps {
			n.Must = append(n.Must, must)
		}
		return n
	}
	thumb := dep(ran(1, "thumb", 20, 29, 1), false, 0)
	thumb.Status, thumb.State, thumb.Result, thumb.Err, thumb.Reason = StatusFailed, StateError, ResultException, errThumbDown, "worker failed"
	avatar := ran(1, "avatar", 12, 30, 2)
	avatar.Sub = &Report{Start: ms(12.5), End: ms(29), Nodes: []NodeReport{ran(0, "cdn", 13, 20, 1), thumb}}
	profile := dep(ran(1, "profile", 10, 40, 1), true, 0)
	profile.Sub = &Report{Start: ms(11), End: ms(38), Nodes: []NodeReport{
		ran(0, "name", 12, 20, 1), avatar, dep(ran(2, "card", 30, 38, 2), true, 0, 1),
	}}
	audit := dep(NodeReport{ID: "audit", Index: 3, Status: StatusSkipped, State: StateError, Result: ResultException,
		Err: ErrSkipped, Ended: ms(45)}, false, 2)
	audit.Sub = &Report{Nodes: []NodeReport{{ID: "x"}, dep(NodeReport{ID: "y", Index: 1}, true, 0)}}
	return &Report{Start: t0, End: ms(45), Nodes: []NodeReport{
		ran(0, "user", 0, 10, 1), profile, dep(ran(2, "page", 40, 45, 1), true, 1), audit,
	}}
}

const subplanHandDOT = `digraph asynctool {
  rankdir=LR;
  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];
  edge [fontname="Helvetica"];
  n0 [label="user\nsuccess 10ms", fillcolor="#a6d96a"];
  subgraph cluster_n1 {
    label="profile";
    style=rounded; color="#969696"; fontname="Helvetica";
    n1 [label="profile\nsuccess 30ms", fillcolor="#a6d96a"];
    n1_0 [label="name\nsuccess 8ms", fillcolor="#a6d96a"];
    subgraph cluster_n1_1 {
      label="avatar";
      style=rounded; color="#969696"; fontname="Helvetica";
      n1_1 [label="avatar\nsuccess 18ms", fillcolor="#a6d96a"];
      n1_1_0 [label="cdn\nsuccess 7ms", fillcolor="#a6d96a"];
      n1_1_1 [label="thumb\nexception 9ms", fillcolor="#f4a582"];
      n1_1_0 -> n1_1_1 [style="dashed,bold", penwidth=3];
      n1_1 -> n1_1_0 [style=dotted, arrowhead=none];
    }
    n1_2 [label="card\nsuccess 8ms", fillcolor="#a6d96a"];
    n1_0 -> n1_2;
    n1_1 -> n1_2 [style=bold, penwidth=3];
    n1 -> n1_0 [style=dotted, arrowhead=none];
    n1 -> n1_1 [style=dotted, arrowhead=none];
  }
  n2 [label="page\nsuccess 5ms", fillcolor="#a6d96a"];
  subgraph cluster_n3 {
    label="audit";
    style=rounded; color="#969696"; fontname="Helvetica";
    n3 [label="audit\nskipped", fillcolor="#d9d9d9"];
    n3_0 [label="x"];
    n3_1 [label="y"];
    n3_0 -> n3_1;
    n3 -> n3_0 [style=dotted, arrowhead=none];
  }
  n0 -> n1 [style=bold, penwidth=3];
  n1 -> n2 [style=bold, penwidth=3];
  n2 -> n3 [style=dashed];
}
`

func TestDOTDrawsSubReportsAsClusters(t *testing.T) {
	assert.Equal(t, subplanHandDOT, subplanHand().DOT())
}

const subplanHandMermaid = `flowchart LR
  n0["user<br/>success 10ms"]
  subgraph cluster_n1 ["profile"]
    n1["profile<br/>success 30ms"]
    n1_0["name<br/>success 8ms"]
    subgraph cluster_n1_1 ["avatar"]
      n1_1["avatar<br/>success 18ms"]
      n1_1_0["cdn<br/>success 7ms"]
      n1_1_1["thumb<br/>exception 9ms"]
      n1_1_0 ==> n1_1_1
      n1_1 -.- n1_1_0
    end
    n1_2["card<br/>success 8ms"]
    n1_0 --> n1_2
    n1_1 ==> n1_2
    n1 -.- n1_0
    n1 -.- n1_1
  end
  n2["page<br/>success 5ms"]
  subgraph cluster_n3 ["audit"]
    n3["audit<br/>skipped"]
    n3_0["x"]
    n3_1["y"]
    n3_0 --> n3_1
    n3 -.- n3_0
  end
  n0 ==> n1
  n1 ==> n2
  n2 -.-> n3
  classDef finish fill:#a6d96a,stroke:#333
  class n0,n1,n1_0,n1_1,n1_1_0,n1_2,n2 finish
  classDef exception fill:#f4a582,stroke:#333
  class n1_1_1 exception
  classDef skipped fill:#d9d9d9,stroke:#333
  class n3 skipped
`

func TestMermaidDrawsSubReportsAsSubgraphs(t *testing.T) {
	assert.Equal(t, subplanHandMermaid, subplanHand().Mermaid())
}

// TestSubPlanStaticReportStaysStatic: a static report's Sub is drawn plain, and so
// is a Sub that is static in a report that is not (the node has not
// started a sub-run).
func TestSubPlanStaticReportStaysStatic(t *testing.T) {
	pl, card := profilePlan(t)
	user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 7, nil }), 0)
	profileNode(pl, card).Depend(user, true)
	rep, err := Describe(user)
	require.NoError(t, err)
	require.NotNil(t, rep.Nodes[1].Sub)
	assert.Equal(t, `digraph asynctool {
  rankdir=LR;
  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];
  edge [fontname="Helvetica"];
  n0 [label="user"];
  subgraph cluster_n1 {
    label="profile";
    style=rounded; color="#969696"; fontname="Helvetica";
    n1 [label="profile"];
    n1_0 [label="name"];
    n1_1 [label="avatar"];
    n1_2 [label="card"];
    n1_0 -> n1_2;
    n1_1 -> n1_2;
    n1 -> n1_0 [style=dotted, arrowhead=none];
    n1 -> n1_1 [style=dotted, arrowhead=none];
  }
  n0 -> n1;
}
`, rep.DOT())
	assert.Equal(t, `flowchart LR
  n0["user"]
  subgraph cluster_n1 ["profile"]
    n1["profile"]
    n1_0["name"]
    n1_1["avatar"]
    n1_2["card"]
    n1_0 --> n1_2
    n1_1 --> n1_2
    n1 -.- n1_0
    n1 -.- n1_1
  end
  n0 --> n1
`, rep.Mermaid())

	// A hand-made static report whose Sub says it ran is drawn plain
	// all the same.
	hand := subplanHand()
	for i := range hand.Nodes {
		n := &hand.Nodes[i]
		n.State, n.Result, n.Ran, n.Err = StateInit, ResultDefault, false, nil
	}
	assert.Equal(t, 1, strings.Count(hand.DOT(), "fillcolor"), "only the default:\n%s", hand.DOT())
	assert.NotContains(t, hand.DOT(), "penwidth")
	assert.NotContains(t, hand.Mermaid(), "class")
	assert.NotContains(t, hand.Mermaid(), "==>")
}

// TestSubPlanExportEscapesSubIDs: a SubPlan node's id is escaped in its cluster's
// title as in node labels, and a sub-report's nodes are named by index
// whatever their ids.
func TestSubPlanExportEscapesSubIDs(t *testing.T) {
	for _, tc := range []struct{ id, dot, mermaid string }{
		{`a"b\c`, `"a\"b\\c"`, `"a#quot;b\c"`},
		{"<b>&#1;`x`", `"<b>&amp;#1;` + "`x`" + `"`, `"#lt;b#gt;#amp;#35;1;#96;x#96;"`},
		{"two\nlines", `"two\nlines"`, `"two lines"`},
		{"end", `"end"`, `"end"`},
		{"", `"#0"`, `"#35;0"`},
	} {
		t.Run(tc.id, func(t *testing.T) {
			rep := &Report{Nodes: []NodeReport{{ID: tc.id, Sub: &Report{Nodes: []NodeReport{{ID: tc.id}}}}}}
			dot := rep.DOT()
			assert.Contains(t, dot, "  subgraph cluster_n0 {\n    label="+tc.dot+";\n")
			assert.Contains(t, dot, "    n0_0 [label="+tc.dot+"];\n")
			m := rep.Mermaid()
			assert.Contains(t, m, "  subgraph cluster_n0 ["+tc.mermaid+"]\n")
			assert.Contains(t, m, "    n0_0["+tc.mermaid+"]\n")
		})
	}
}

// sleeper is a node that sleeps d and returns 1.
func sleeper(id string, d time.Duration) *WorkerWrapper[int, int] {
	return NewWrapper(id, WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) {
		time.Sleep(d)
		return 1, nil
	}), 0)
}

// subplanNested runs, under fake time with timings, a graph whose "mid"
// node runs a plan whose "in" node runs another, and returns its report:
//
//	start (1ms) ──> mid ──> end (1ms)
//	                 u (3ms) ──> in ──> v (1ms)
//	                              a (5ms) ─┬─> c (2ms)
//	                              b (8ms) ─┘
func subplanNested(t *testing.T) *Report {
	t.Helper()
	a, b := sleeper("a", 5*time.Millisecond), sleeper("b", 8*time.Millisecond)
	c := sleeper("c", 2*time.Millisecond).Depend(a, true).Depend(b, true)
	inner, err := Compile(a, b)
	require.NoError(t, err)
	u := sleeper("u", 3*time.Millisecond)
	in := NewWrapper("in", SubPlan[int, int]{Plan: inner, Output: func(sub *Run) (int, error) {
		r := c.ResultIn(sub)
		return r.Value, r.Err
	}}, 0).Depend(u, true)
	v := sleeper("v", time.Millisecond).Depend(in, true)
	middle, err := Compile(u)
	require.NoError(t, err)
	var rep *Report
	synctest.Test(t, func(t *testing.T) {
		as := New(WithTimings(true))
		defer as.Close()
		start := sleeper("start", time.Millisecond)
		mid := NewWrapper("mid", SubPlan[int, int]{Plan: middle, Output: func(sub *Run) (int, error) {
			r := v.ResultIn(sub)
			return r.Value, r.Err
		}}, 0).Depend(start, true)
		sleeper("end", time.Millisecond).Depend(mid, true)
		run, err := as.Start(context.Background(), time.Second, start)
		require.NoError(t, err)
		require.NoError(t, run.Wait(context.Background()))
		rep = run.Report()
	})
	return rep
}

// TestSubPlanNestedRunNames checks the names of a real run's sub-reports in
// both graph formats: unique, valid, and never an outer node's.
func TestSubPlanNestedRunNames(t *testing.T) {
	rep := subplanNested(t)
	dot, m := rep.DOT(), rep.Mermaid()
	for _, want := range []string{
		"subgraph cluster_n1 {", "subgraph cluster_n1_1 {", `n1_1_2 [label="c\nsuccess 2ms"`,
		"n1_1_0 -> n1_1_2", "n1 -> n1_0 [style=dotted, arrowhead=none]", "n1_1 -> n1_1_0 [style=dotted, arrowhead=none]",
		"n1_1 -> n1_1_1 [style=dotted, arrowhead=none]", "n0 -> n1 [style=bold, penwidth=3]",
	} {
		assert.Contains(t, dot, want)
	}
	for _, want := range []string{
		`subgraph cluster_n1 ["mid"]`, `subgraph cluster_n1_1 ["in"]`, `n1_1_2["c<br/>success 2ms"]`,
		"n1 -.- n1_0", "n1_1 -.- n1_1_0", "n1_1 -.- n1_1_1", "n1_1_1 ==> n1_1_2",
	} {
		assert.Contains(t, m, want)
	}
	// Mermaid: every node and subgraph id declared once, a valid id,
	// and every subgraph closed.
	decl := regexp.MustCompile(`^\s*(?:subgraph )?([A-Za-z][A-Za-z0-9_]*) ?\[`)
	seen := map[string]bool{}
	depth := 0
	for _, line := range strings.Split(m, "\n") {
		switch s := strings.TrimSpace(line); {
		case strings.HasPrefix(s, "subgraph "):
			depth++
		case s == "end":
			depth--
			require.GreaterOrEqual(t, depth, 0, m)
		}
		if g := decl.FindStringSubmatch(line); g != nil {
			assert.False(t, seen[g[1]], "%s declared twice:\n%s", g[1], m)
			seen[g[1]] = true
		}
	}
	assert.Zero(t, depth, "every subgraph ends:\n%s", m)
	assert.Len(t, seen, 3+3+3+2, "3 outer nodes, 3 of mid, 3 of in, 2 subgraphs:\n%s", m)
}

// needDot skips t when Graphviz's dot is not on PATH, except under CI,
// whose .ci/run installs it (as TestDOTRenders).
func needDot(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("dot not found on PATH, and CI is set: .ci/run must install graphviz: %v", err)
		}
		t.Skip("dot (graphviz) not on PATH")
	}
}

// TestSubPlanDOTRendersClusters feeds DOT with sub-reports to Graphviz and
// reads the layout back: no warnings, and each cluster holds its SubPlan
// node and the nodes of its Sub, and nothing else.
func TestSubPlanDOTRendersClusters(t *testing.T) {
	needDot(t)
	static, err := Describe(func() Wrapper {
		pl, card := profilePlan(t)
		user := NewWrapper("user", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 7, nil }), 0)
		profileNode(pl, card).Depend(user, true)
		return user
	}())
	require.NoError(t, err)
	weird := &Report{Nodes: []NodeReport{{ID: `q"uo\te` + "\n{x} [y]; <z> -> ✨", Sub: &Report{Nodes: []NodeReport{
		{ID: "}"}, {ID: "", Index: 1, Deps: []int{0}, Must: []bool{false}, Sub: &Report{Nodes: []NodeReport{{ID: "subgraph"}}}},
	}}}}}
	for name, rep := range map[string]*Report{"hand": subplanHand(), "nested run": subplanNested(t), "static": static, "weird": weird} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command("dot", "-Tjson")
			cmd.Stdin = strings.NewReader(rep.DOT())
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "dot failed: %s\n%s", stderr.String(), rep.DOT())
			assert.Empty(t, stderr.String(), "dot warnings")
			var layout struct {
				Objects []struct {
					Name  string `json:"name"`
					Label string `json:"label"`
					Nodes []int  `json:"nodes"`
				} `json:"objects"`
			}
			require.NoError(t, json.Unmarshal(out, &layout))
			names := map[int]string{}
			for gvid, o := range layout.Objects {
				names[gvid] = o.Name
			}
			clusters := 0
			for _, o := range layout.Objects {
				node, ok := strings.CutPrefix(o.Name, "cluster_")
				if !ok {
					continue
				}
				clusters++
				var got, want []string
				for _, gvid := range o.Nodes {
					got = append(got, names[gvid])
				}
				for _, n := range names {
					if n == node || strings.HasPrefix(n, node+"_") && !strings.HasPrefix(n, "cluster_") {
						want = append(want, n)
					}
				}
				assert.ElementsMatch(t, want, got, "%s holds its node and its Sub's", o.Name)
			}
			assert.Equal(t, countSubs(rep), clusters, "one cluster per Sub")
		})
	}
}

// countSubs counts the sub-reports in rep, at any depth.
func countSubs(rep *Report) int {
	c := 0
	for _, n := range rep.Nodes {
		if n.Sub != nil {
			c += 1 + countSubs(n.Sub)
		}
	}
	return c
}

// subplanTrace writes rep's Chrome trace and returns its events, and the
// names of its processes and tracks by pid.
func subplanTrace(t *testing.T, rep *Report) (events []traceEvent, processes map[int]string, tracks map[int]map[int]string) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, rep.WriteChromeTrace(&buf))
	var trace struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &trace), "got %s", buf.Bytes())
	processes, tracks = map[int]string{}, map[int]map[int]string{}
	for _, e := range trace.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "process_name":
			processes[e.Pid] = e.Args["name"].(string)
		case e.Ph == "M" && e.Name == "thread_name":
			if tracks[e.Pid] == nil {
				tracks[e.Pid] = map[int]string{}
			}
			tracks[e.Pid][e.Tid] = e.Args["name"].(string)
		default:
			events = append(events, e)
		}
	}
	return events, processes, tracks
}

func TestChromeTraceShowsSubRuns(t *testing.T) {
	rep := subplanHand()
	events, processes, tracks := subplanTrace(t, rep)
	assert.Equal(t, map[int]string{1: "asynctool run", 2: "sub-run of profile", 3: "sub-run of profile/avatar"}, processes,
		"a process per sub-run that has events: audit's static Sub adds none")
	assert.Equal(t, map[int]map[int]string{
		1: {0: "not run", 1: "lane 1"},
		2: {1: "lane 1", 2: "lane 2"},
		3: {1: "lane 1"},
	}, tracks, "each process names its own tracks")
	type ev struct {
		name, ph string
		pid, tid int
		ts, dur  float64
	}
	var got []ev
	for _, e := range events {
		var dur float64
		if e.Dur != nil {
			dur = *e.Dur
		}
		got = append(got, ev{e.Name, e.Ph, e.Pid, e.Tid, e.Ts, dur})
	}
	assert.Equal(t, []ev{
		{"user", "X", 1, 1, 0, 10000},
		{"profile", "X", 1, 1, 10000, 30000},
		{"page", "X", 1, 1, 40000, 5000},
		{"audit", "i", 1, 0, 45000, 0},
		{"profile/name", "X", 2, 1, 12000, 8000},
		{"profile/avatar", "X", 2, 2, 12000, 18000},
		{"profile/card", "X", 2, 2, 30000, 8000},
		{"profile/avatar/cdn", "X", 3, 1, 13000, 7000},
		{"profile/avatar/thumb", "X", 3, 1, 20000, 9000},
	}, got, "sub-runs' nodes at their times from the outer run's start")
	assert.Equal(t, "down", events[8].Args["error"])

	// A sub-run's node without times is refused as an outer node is.
	rep.Nodes[1].Sub.Nodes[1].Sub.Nodes[0].Started = time.Time{}
	var buf bytes.Buffer
	assert.ErrorContains(t, rep.WriteChromeTrace(&buf), `node "profile/avatar/cdn" ran but the report has no times`)
	assert.Zero(t, buf.Len(), "nothing written")
}

// TestChromeTraceOfANestedRun: in a real run, each sub-run's events
// fall within its SubPlan node's, at their real times.
func TestChromeTraceOfANestedRun(t *testing.T) {
	rep := subplanNested(t)
	events, processes, _ := subplanTrace(t, rep)
	assert.Equal(t, map[int]string{1: "asynctool run", 2: "sub-run of mid", 3: "sub-run of mid/in"}, processes)
	at := map[string][2]float64{}
	for _, e := range events {
		require.Equal(t, "X", e.Ph, e.Name)
		at[e.Name] = [2]float64{e.Ts, e.Ts + *e.Dur}
	}
	ms := func(from, to float64) [2]float64 { return [2]float64{from * 1000, to * 1000} }
	assert.Equal(t, map[string][2]float64{
		"start": ms(0, 1), "mid": ms(1, 15), "end": ms(15, 16),
		"mid/u": ms(1, 4), "mid/in": ms(4, 14), "mid/v": ms(14, 15),
		"mid/in/a": ms(4, 9), "mid/in/b": ms(4, 12), "mid/in/c": ms(12, 14),
	}, at)
}

// TestSubPlanCriticalPathStaysOuter: CriticalPath is the outer graph's; a
// SubPlan node counts with its whole duration, and its Sub has a
// critical path of its own.
func TestSubPlanCriticalPathStaysOuter(t *testing.T) {
	rep := subplanHand()
	assert.Equal(t, []int{0, 1, 2}, rep.CriticalPath(), "user, profile, page")
	assert.Equal(t, []int{1, 2}, rep.Nodes[1].Sub.CriticalPath(), "avatar, card, inside profile")
	nested := subplanNested(t)
	assert.Equal(t, []int{0, 1, 2}, nested.CriticalPath(), "start, mid, end")
	assert.Equal(t, []int{0, 1, 2}, nested.Nodes[1].Sub.CriticalPath(), "u, in, v")
	assert.Equal(t, []int{1, 2}, nested.Nodes[1].Sub.Nodes[1].Sub.CriticalPath(), "b, c")
}

// TestSubPlanErrLeavesSubRunsToTheirReports: Report.Err joins the errors
// of the run's own nodes; a SubPlan node's is what its Output decided,
// and the errors of its sub-run's nodes are in its Sub's Err.
func TestSubPlanErrLeavesSubRunsToTheirReports(t *testing.T) {
	boom := errors.New("boom")
	failing := NewWrapper("fails", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 0, boom }), 0)
	ok := NewWrapper("ok", WorkerFunc[int, int](func(context.Context, int, Wrappers) (int, error) { return 5, nil }), 0)
	pl, err := Compile(failing, ok)
	require.NoError(t, err)
	a := New()
	defer a.Close()

	lenient := NewWrapper("lenient", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
		return ok.ResultIn(sub).Value, nil
	}}, 0)
	run, err := a.Start(context.Background(), time.Second, lenient)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	rep := run.Report()
	assert.NoError(t, rep.Err(), "every node of the run succeeded")
	assert.ErrorIs(t, rep.Nodes[0].Sub.Err(), boom, "the sub-run's failure is in its own report")

	strict := NewWrapper("strict", SubPlan[int, int]{Plan: pl, Output: func(sub *Run) (int, error) {
		r := failing.ResultIn(sub)
		return r.Value, r.Err
	}}, 0)
	run, err = a.Start(context.Background(), time.Second, strict)
	require.NoError(t, err)
	require.NoError(t, run.Wait(context.Background()))
	err = run.Report().Err()
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, `node "strict": boom`, err.Error(), "once, as the SubPlan node's error")
}
