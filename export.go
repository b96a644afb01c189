package asynctool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// This file renders a Report as pictures: Graphviz DOT and Mermaid for the
// graph, Chrome trace-event JSON for the timeline. The graph formats'
// conventions are in DOT's doc comment.

// Fill colours, shared by the DOT and Mermaid exports.
const (
	colorFinish    = "#a6d96a"
	colorException = "#f4a582"
	colorSkipped   = "#d9d9d9"
	colorTimeout   = "#fdae61"
	colorWorking   = "#abd9e9"
	colorInit      = "#ffffff"
	// colorCluster outlines the box of a node's sub-report (NodeReport.Sub).
	colorCluster = "#969696"
)

// outcome classifies a node for the pictures: a class name, its fill colour
// and the word shown under the node's id ("" for a node that has not
// ended).
func outcome(n *NodeReport) (class, color, word string) {
	switch {
	case n.State == StateFinish:
		return "finish", colorFinish, "success"
	case stoppedByRunEnd(n):
		return "skipped", colorSkipped, "run ended" // not needed, as a node skipped
	case n.Result == ResultTimeout:
		return "timeout", colorTimeout, "timeout"
	case n.State == StateError && isSkip(n.Err):
		return "skipped", colorSkipped, "skipped"
	case n.State == StateError && n.Err == ErrNotTaken:
		return "skipped", colorSkipped, "not taken"
	case n.State == StateError:
		return "exception", colorException, "exception"
	case n.State == StateWorking:
		return "working", colorWorking, "working"
	}
	return "init", colorInit, ""
}

// stoppedByRunEnd reports whether n was stopped because its run ended
// with its EndsRun nodes (or, in a ForEach's sub-run, its Join decided):
// a node nobody waited for any more.
func stoppedByRunEnd(n *NodeReport) bool {
	return n.Result == ResultTimeout && errors.Is(n.Err, ErrRunEnded)
}

// isStatic reports whether rep describes a graph that has not run: no node
// has started or ended.
func (rep *Report) isStatic() bool {
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		if n.State != StateInit || n.Result != ResultDefault || n.Ran {
			return false
		}
	}
	return true
}

// nodeLines returns the lines of node n's label: its id, its join when it
// is not the default one, then (for a run) its outcome, its duration when
// times were recorded, and its attempts when it ran more than once.
func (rep *Report) nodeLines(n *NodeReport, static bool) []string {
	lines := []string{displayID(n)}
	if n.Join != "" {
		lines = append(lines, n.Join)
	}
	if static {
		return lines
	}
	_, _, word := outcome(n)
	var parts []string
	if word != "" {
		parts = append(parts, word)
	}
	if d := n.Duration(); d > 0 {
		parts = append(parts, roundDuration(d).String())
	}
	if n.Attempts > 1 {
		parts = append(parts, "×"+strconv.Itoa(n.Attempts))
	}
	if len(parts) > 0 {
		lines = append(lines, strings.Join(parts, " "))
	}
	return lines
}

// displayID is n's id as the pictures show it: "#" and its index for the
// empty id (see plainName), and an id quoted (as by strconv.Quote) that
// would read as something else: one that starts with '#' (the name of a
// node without an id), or with '"' (a quoted id), or holds bytes that are
// not UTF-8 (which a picture shows as U+FFFD, whatever they are).
func displayID(n *NodeReport) string {
	if readsAsAnother(n.ID) {
		return strconv.Quote(n.ID)
	}
	return plainName(n.ID, n.Index)
}

// readsAsAnother reports whether id, shown as it is, could be read as
// another node's name: it starts with '#' (the name of a node without an
// id) or '"' (a quoted id), or holds bytes that are not UTF-8 (shown as
// U+FFFD, whatever they are). Every rendering of a report quotes such an
// id.
func readsAsAnother(id string) bool {
	return strings.HasPrefix(id, "#") || strings.HasPrefix(id, `"`) || !utf8.ValidString(id)
}

// plainName is the node with the given id and index as the pictures and
// Wrappers.Path show it: the id, or "#" and the index for the empty id.
func plainName(id string, index int) string {
	if id == "" {
		return "#" + strconv.Itoa(index)
	}
	return id
}

// roundDuration keeps about three significant digits, so labels stay
// short: 12.35ms, not 12.345678ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Second:
		return d.Round(time.Second)
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// must reports whether n's k-th dependency is a must one. A report built
// by hand may give Must fewer entries than Deps: the edges it leaves out
// are drawn as optional, not a panic.
func (n *NodeReport) must(k int) bool { return k < len(n.Must) && n.Must[k] }

// criticalEdges returns the set of edges (from, to) on the critical path.
func (rep *Report) criticalEdges() map[[2]int]bool {
	path := rep.CriticalPath()
	if len(path) < 2 {
		return nil
	}
	set := make(map[[2]int]bool, len(path)-1)
	for k := 1; k < len(path); k++ {
		set[[2]int{path[k-1], path[k]}] = true
	}
	return set
}

// DOT renders the report as a Graphviz digraph, laid out left to right.
// Render it with, for example, dot -Tsvg.
//
// DOT and [Report.Mermaid] follow one convention. Nodes are listed in
// report order and named by their index (n0, n1, ...), so any id,
// including the empty one, quotes, spaces and any Unicode, appears only
// inside an escaped label. A label names a node without an id by "#" and
// its index, as [Report.String] does, and so quotes (as by
// [strconv.Quote]) an id that starts with '#' or '"', or holds bytes that
// are not UTF-8, so that no two nodes read alike: node "#1" and the node
// at index 1 without an id. Edges go from upstream to downstream: solid
// for must dependencies, dashed for others (as [NodeReport.Must] tells
// them apart, by the node's join), and thick for the edges of the
// critical path (see [Report.CriticalPath]). A node whose join is not
// the default one shows it under its id (`when "route"`, so a switch's
// branches can be told apart). Durations appear on the nodes
// when the run recorded times ([WithTimings] or hooks). A node's fill
// colour is its outcome:
//
//	finish (success)                  green   #a6d96a
//	error: exception (failed, panic,  red     #f4a582
//	       upstream failed)
//	error: skipped (ErrSkipped),      grey    #d9d9d9
//	       not taken (ErrNotTaken) or
//	       stopped by the run's end
//	       (ErrRunEnded, see EndsRun)
//	error: timeout                    orange  #fdae61
//	working (a snapshot of a run)     blue    #abd9e9
//	init (never ran, not ended)       white   #ffffff
//
// A static report (every node in StateInit with no result, as from
// [Describe] or [Plan.Describe]) is drawn as the plain graph, with the
// joins: no colours, no outcomes, no durations, no critical path.
//
// A node whose [NodeReport.Sub] is set (a [SubPlan], [SubGraph] or
// [ForEach] node) is drawn inside a box (a cluster, cluster_n3 for node
// n3) labelled with its id, with the nodes of its Sub: the node itself,
// which keeps its edges to and from the outer graph, comes first, and a
// dotted line without an arrowhead ties it to each start node (a node
// without dependencies) of the Sub. The Sub's nodes are named after the
// node, n3_0, n3_1, ..., so no name clashes with the outer graph's, and a
// Sub's own nodes with a Sub are drawn the same way, one box inside
// another (n3_1_0, ...). The Sub is drawn by the rules above, as a report
// of its own: its outcomes and colours, and the thick edges of its own
// critical path, which is the sub-run's and not part of the outer one.
// It is drawn plain when it is static (the shape of a SubPlan or ForEach
// node that has not started a sub-run) and when the outer report is.
func (rep *Report) DOT() string {
	if rep == nil {
		rep = &Report{}
	}
	var b strings.Builder
	b.WriteString("digraph asynctool {\n")
	b.WriteString("  rankdir=LR;\n")
	b.WriteString("  node [shape=box, style=\"rounded,filled\", fillcolor=\"" + colorInit + "\", fontname=\"Helvetica\"];\n")
	b.WriteString("  edge [fontname=\"Helvetica\"];\n")
	rep.writeDOT(&b, "n", "  ", rep.isStatic())
	b.WriteString("}\n")
	return b.String()
}

// writeDOT writes rep's nodes and edges for DOT, each line after indent,
// naming node i prefix+i, and drawing it plain when static is set.
func (rep *Report) writeDOT(b *strings.Builder, prefix, indent string, static bool) {
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		name := prefix + strconv.Itoa(n.Index)
		in := indent
		if n.Sub != nil {
			fmt.Fprintf(b, "%ssubgraph cluster_%s {\n", indent, name)
			in = indent + "  "
			title := displayID(n)
			if s := n.Sub.bounds(); s != "" {
				title += "\n" + s
			}
			fmt.Fprintf(b, "%slabel=%s;\n", in, dotQuote(title))
			fmt.Fprintf(b, "%sstyle=rounded; color=%q; fontname=\"Helvetica\";\n", in, colorCluster)
		}
		fmt.Fprintf(b, "%s%s [label=%s", in, name, dotQuote(strings.Join(rep.nodeLines(n, static), "\n")))
		if !static {
			_, color, _ := outcome(n)
			if color != colorInit {
				fmt.Fprintf(b, ", fillcolor=%q", color)
			}
		}
		b.WriteString("];\n")
		if n.Sub == nil {
			continue
		}
		n.Sub.writeDOT(b, name+"_", in, static || n.Sub.isStatic())
		for _, s := range n.Sub.starts() {
			fmt.Fprintf(b, "%s%s -> %s_%d [style=dotted, arrowhead=none];\n", in, name, name, s)
		}
		fmt.Fprintf(b, "%s}\n", indent)
	}
	var critical map[[2]int]bool
	if !static {
		critical = rep.criticalEdges()
	}
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		for k, d := range n.Deps {
			var attrs []string
			must := n.must(k)
			if !must {
				attrs = append(attrs, "style=dashed")
			}
			if critical[[2]int{d, n.Index}] {
				if must {
					attrs = append(attrs, "style=bold")
				} else {
					attrs[0] = "style=\"dashed,bold\""
				}
				attrs = append(attrs, "penwidth=3")
			}
			fmt.Fprintf(b, "%s%s%d -> %s%d", indent, prefix, d, prefix, n.Index)
			if len(attrs) > 0 {
				b.WriteString(" [" + strings.Join(attrs, ", ") + "]")
			}
			b.WriteString(";\n")
		}
	}
}

// starts returns the indexes of rep's nodes that have no dependencies,
// the start nodes of its graph.
func (rep *Report) starts() []int {
	var s []int
	for i := range rep.Nodes {
		if len(rep.Nodes[i].Deps) == 0 {
			s = append(s, rep.Nodes[i].Index)
		}
	}
	return s
}

// dotQuote returns s as a DOT double-quoted string. Backslashes and quotes
// are escaped (a backslash would otherwise start one of DOT's label
// escapes, such as \N), an ampersand becomes &amp; (Graphviz reads HTML
// entities such as &#65; in any label, and &#1; would put a control
// character into an SVG), a newline becomes a centred line break, and
// other control characters become spaces. Any other character, Unicode
// included, is kept as is: DOT files are UTF-8. A long string is written
// as quoted pieces of at most dotPiece bytes joined with DOT's "+", which
// Graphviz reads as one string: it refuses a quoted string longer than
// 16384 bytes.
func dotQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	piece := 0
	var enc [8]byte
	for _, r := range s {
		var e []byte
		switch {
		case r == '"' || r == '\\':
			e = append(enc[:0], '\\', byte(r))
		case r == '&':
			e = append(enc[:0], "&amp;"...)
		case r == '\n':
			e = append(enc[:0], `\n`...)
		case unicode.IsControl(r):
			e = append(enc[:0], ' ')
		default:
			e = utf8.AppendRune(enc[:0], r)
		}
		if piece+len(e) > dotPiece {
			b.WriteString(`" + "`)
			piece = 0
		}
		b.Write(e)
		piece += len(e)
	}
	b.WriteByte('"')
	return b.String()
}

// dotPiece is the longest quoted piece dotQuote writes, well within
// Graphviz's limit.
const dotPiece = 4096

// Mermaid renders the report as a Mermaid flowchart, laid out left to
// right, for a README or a pull request (GitHub renders a ```mermaid block).
// Must dependencies are solid arrows (-->), others dotted (-.->), as for DOT,
// and the critical path's edges thick (==>); Mermaid has no thick dotted
// arrow, so an optional edge on the critical path is drawn thick. Colours
// and labels are as for [Report.DOT], applied through classDef lines.
//
// A node's [NodeReport.Sub] (a [SubPlan], [SubGraph] or [ForEach] node's)
// is drawn as for DOT, in a subgraph block (subgraph cluster_n3, titled
// with the node's id) that holds the node first, then the Sub's nodes
// (n3_0, n3_1, ...) and edges; a dotted link without an arrowhead (-.-)
// ties the node to each start node of the Sub.
func (rep *Report) Mermaid() string {
	if rep == nil {
		rep = &Report{}
	}
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	classes := map[string][]string{}
	var order []string
	rep.writeMermaid(&b, "n", "  ", rep.isStatic(), func(class, name string) {
		if _, ok := classes[class]; !ok {
			order = append(order, class)
		}
		classes[class] = append(classes[class], name)
	})
	for _, class := range order {
		var color string
		switch class {
		case "finish":
			color = colorFinish
		case "exception":
			color = colorException
		case "skipped":
			color = colorSkipped
		case "timeout":
			color = colorTimeout
		case "working":
			color = colorWorking
		default:
			color = colorInit
		}
		fmt.Fprintf(&b, "  classDef %s fill:%s,stroke:#333\n", class, color)
		fmt.Fprintf(&b, "  class %s %s\n", strings.Join(classes[class], ","), class)
	}
	return b.String()
}

// writeMermaid writes rep's nodes and edges for Mermaid, each line after
// indent, naming node i prefix+i; it draws them plain when static is
// set, and otherwise passes each node's class and name to class.
func (rep *Report) writeMermaid(b *strings.Builder, prefix, indent string, static bool, class func(class, name string)) {
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		name := prefix + strconv.Itoa(n.Index)
		in := indent
		if n.Sub != nil {
			title := []string{displayID(n)}
			if s := n.Sub.bounds(); s != "" {
				title = append(title, s)
			}
			fmt.Fprintf(b, "%ssubgraph cluster_%s [\"%s\"]\n", indent, name, mermaidEscape(title))
			in = indent + "  "
		}
		fmt.Fprintf(b, "%s%s[\"%s\"]\n", in, name, mermaidEscape(rep.nodeLines(n, static)))
		if !static {
			c, _, _ := outcome(n)
			class(c, name)
		}
		if n.Sub == nil {
			continue
		}
		n.Sub.writeMermaid(b, name+"_", in, static || n.Sub.isStatic(), class)
		for _, s := range n.Sub.starts() {
			fmt.Fprintf(b, "%s%s -.- %s_%d\n", in, name, name, s)
		}
		fmt.Fprintf(b, "%send\n", indent)
	}
	var critical map[[2]int]bool
	if !static {
		critical = rep.criticalEdges()
	}
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		for k, d := range n.Deps {
			arrow := "-->"
			switch {
			case critical[[2]int{d, n.Index}]:
				arrow = "==>"
			case !n.must(k):
				arrow = "-.->"
			}
			fmt.Fprintf(b, "%s%s%d %s %s%d\n", indent, prefix, d, arrow, prefix, n.Index)
		}
	}
}

// mermaidEscape joins a label's lines with <br/> and escapes the text for
// a double-quoted Mermaid label: characters Mermaid or its HTML labels
// would interpret (" # & < >, the backtick that starts a Markdown label,
// and %, since Mermaid reads "%%{" anywhere as a directive and "%%" at
// the start of a line as a comment) become Mermaid entity codes; control
// characters, and U+2028 and U+2029, which Mermaid's JavaScript takes
// for line ends, become spaces.
func mermaidEscape(lines []string) string {
	var b strings.Builder
	for i, line := range lines {
		if i > 0 {
			b.WriteString("<br/>")
		}
		for _, r := range line {
			switch {
			case r == '"':
				b.WriteString("#quot;")
			case r == '#':
				b.WriteString("#35;")
			case r == '&':
				b.WriteString("#amp;")
			case r == '<':
				b.WriteString("#lt;")
			case r == '>':
				b.WriteString("#gt;")
			case r == '`':
				b.WriteString("#96;")
			case r == '%':
				b.WriteString("#37;")
			case unicode.IsControl(r), r == '\u2028', r == '\u2029':
				b.WriteByte(' ')
			default:
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

// CriticalPath returns the indexes, in [Report.Nodes], of the run's
// critical path, first node first. It is defined as the chain of nodes
// that ran, each one a dependency (must or optional) of the next that
// ended before the next started, that ends at the node whose run ended
// last and whose durations add up to the most (of nodes that ended in
// the same instant, it ends at the one whose chain weighs the most, the
// first in Nodes if they weigh the same); ties go to the dependency
// listed first. A dependency still running when the node started (the
// slower of racing replicas under an any-of join, say) is not one the
// node waited for, so it is not on the chain. The node that ended last
// bounds the run's length, and the chain is the work that had to happen
// one after another before it, so its durations add up to no more than
// the run and shortening any node on it is what can make the run faster.
// A node stopped because the run ended with its [WorkerWrapper.EndsRun]
// nodes (or, in a ForEach's sub-run, because its Join had decided), or
// by another node's [PolicyEnd] failure (its Err is the run's own
// [*EndError], which [Report.RunErr] holds once the run has ended), ends
// in that instant or after, but nothing waited for it: the path does not
// end at it, but at the last of the other nodes that ran, such as the
// node that ended the run (at it only if no other node ran). The nodes a
// PolicyEnd failure stopped are told by RunErr, so only in a report of
// the ended run: in one taken before (from a hook or a callback, while
// RunErr is nil), the path may end at such a node.
//
// CriticalPath returns nil when no node ran with recorded times: for a
// static report, or a run without [WithTimings] or hooks.
//
// It is a path through the report's own nodes and does not enter
// sub-reports: a node with a sub-run ([SubPlan], [SubGraph], [ForEach])
// counts with its whole duration, which includes its sub-run, and the
// chain inside the sub-run is its [NodeReport.Sub]'s CriticalPath (the
// one DOT and Mermaid draw inside the node's box).
func (rep *Report) CriticalPath() []int {
	if rep == nil {
		return nil
	}
	// Nodes are in topological order, so one pass computes, for every
	// node that ran, the heaviest chain ending at it.
	pos := make(map[int]int, len(rep.Nodes)) // index -> position in Nodes
	for i := range rep.Nodes {
		pos[rep.Nodes[i].Index] = i
	}
	best := make([]time.Duration, len(rep.Nodes))
	prev := make([]int, len(rep.Nodes))
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		prev[i] = -1
		if !n.Ran {
			continue
		}
		for _, d := range n.Deps {
			j, ok := pos[d]
			if !ok || j >= i || !rep.Nodes[j].Ran {
				continue
			}
			if up := &rep.Nodes[j]; up.Ended.IsZero() || up.Ended.After(n.Started) {
				continue // n did not wait for it
			}
			if prev[i] < 0 || best[j] > best[prev[i]] {
				prev[i] = j
			}
		}
		best[i] = n.Duration()
		if prev[i] >= 0 {
			best[i] += best[prev[i]]
		}
	}
	// The path ends at the node that ended last; of nodes that ended in
	// the same instant (common under testing/synctest), at the one whose
	// chain weighs the most, the first in Nodes if they weigh the same.
	// Nodes stopped by the run's end are left out, unless no other node
	// ran: those its EndsRun nodes stopped, and those that another node's
	// PolicyEnd failure stopped, whose Err is the run's own *EndError
	// (the error of a SubPlan node that its sub-run's PolicyEnd failed is
	// the sub-run's).
	var end *EndError
	errors.As(rep.RunErr, &end)
	stopped := func(n *NodeReport) bool {
		e, ok := n.Err.(*EndError)
		return stoppedByRunEnd(n) || ok && e != nil && e == end
	}
	last := -1
	for _, skipStopped := range [...]bool{true, false} {
		for i := range rep.Nodes {
			n := &rep.Nodes[i]
			if !n.Ran || n.Ended.IsZero() || (skipStopped && stopped(n)) {
				continue
			}
			if last < 0 || n.Ended.After(rep.Nodes[last].Ended) ||
				(n.Ended.Equal(rep.Nodes[last].Ended) && best[i] > best[last]) {
				last = i
			}
		}
		if last >= 0 {
			break
		}
	}
	if last < 0 {
		return nil
	}
	var path []int
	for i := last; i >= 0; i = prev[i] {
		path = append(path, rep.Nodes[i].Index)
	}
	for l, r := 0, len(path)-1; l < r; l, r = l+1, r-1 {
		path[l], path[r] = path[r], path[l]
	}
	return path
}

// traceEvent is one entry of the Chrome trace-event format.
type traceEvent struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Ph    string         `json:"ph"`
	Ts    float64        `json:"ts"`
	Dur   *float64       `json:"dur,omitempty"`
	Pid   int            `json:"pid"`
	Tid   int            `json:"tid"`
	Scope string         `json:"s,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// WriteChromeTrace writes the run's timeline to w in the Chrome
// trace-event JSON format, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open.
//
// Every node that ran is one complete ("X") event named by its id ("#"
// and its index for the empty id, as [Report.DOT] shows it), from its
// start to its end, on the track of the goroutine lane that ran it (tid =
// [NodeReport].Lane; a thread_name metadata event names each track "lane
// N"). Timestamps and durations are in microseconds from
// [Report].Start. The event's args hold the node's status, state, result,
// attempts, wait for a goroutine, reason and error. A node that never ran
// but ended (skipped, failed upstream, stopped by the deadline) is an
// instant ("i") event at its end time on a track of its own, tid 0, named
// "not run"; a node that neither ran nor ended is left out.
//
// In a snapshot of a run that is going on ([Run.Report] before the run
// ended), a node that started but has not ended (its status is running,
// or pending after a failed attempt) is a begin ("B") event at its start
// on its lane, without an end: viewers draw it to the end of the trace.
//
// The run's own nodes are process 1, "asynctool run". The nodes of a
// [SubPlan], [SubGraph] or [ForEach] node's [NodeReport.Sub] (its last
// sub-run) are a process of their own, numbered from 2 in report order,
// named "sub-run of ID" and with tracks as above for the sub-run's lanes
// and its nodes that did not run: a sub-run's lanes are its own, so its
// events never share a track with the outer run's. Their events are named
// by the path of node ids that leads to them ("profile/name",
// "prices/2"; "a/b/c" for a sub-run inside a sub-run), and placed at
// their real times, from the outer run's Start. An id that holds a '/'
// or bytes that are not UTF-8 (which JSON would all turn into U+FFFD), or
// starts with '#' or '"', is quoted in names, as by [strconv.Quote], so
// that names are unambiguous: node "a/b" is `"a/b"`, not node "b" of the
// sub-run of node "a", and node "#2" is `"#2"`, not the anonymous node 2.
// A Sub in which no node ran or ended (the node has not started a
// sub-run) adds no process.
//
// It returns an error, and writes nothing, if a node ran, in the run or
// in a sub-run, but the report has no times for it: record them with
// [WithTimings] or hooks.
func (rep *Report) WriteChromeTrace(w io.Writer) error {
	if rep == nil {
		rep = &Report{}
	}
	t := chromeTrace{start: rep.Start}
	if err := t.add(rep, ""); err != nil {
		return err
	}
	data, err := json.Marshal(struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{append(t.meta, t.nodes...), "ms"})
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// chromeTrace gathers the events of WriteChromeTrace.
type chromeTrace struct {
	start time.Time    // the outer run's, which timestamps count from
	meta  []traceEvent // metadata events, written first
	nodes []traceEvent
	pids  int // processes so far
}

// add adds the events of rep's nodes, each named path followed by its
// id, as a process of its own, then those of their sub-reports. path is
// empty for the outer report, whose process is there even without
// events.
func (t *chromeTrace) add(rep *Report, path string) error {
	us := func(tm time.Time) float64 { return float64(tm.Sub(t.start)) / float64(time.Microsecond) }
	var nodes []traceEvent
	lanes := map[int]bool{}
	notRun := false
	for i := range rep.Nodes {
		n := &rep.Nodes[i]
		name := path + traceID(n)
		args := map[string]any{"state": n.State.String(), "result": n.Result.String(), "attempts": n.Attempts}
		if n.Status != 0 {
			args["status"] = n.Status.String()
		}
		if n.Reason != "" {
			args["reason"] = n.Reason
		}
		if n.Err != nil {
			// As String and Err print it: fmt recovers an Error method
			// that panics, such as a typed nil's (a worker that returned
			// a nil *MyError as its error).
			args["error"] = fmt.Sprint(n.Err)
		}
		if n.DecidedBy != "" {
			args["decided_by"] = n.DecidedBy
		} else if n.decidedAt > 0 {
			args["decided_by"] = errName("", n.decidedAt-1)
		}
		switch {
		case n.Ran:
			if n.Started.IsZero() || t.start.IsZero() {
				return fmt.Errorf("asynctool: node %s ran but the report has no times for it; run with WithTimings or hooks", quotedOnce(name))
			}
			args["wait_us"] = float64(n.Wait) / float64(time.Microsecond)
			ev := traceEvent{Name: name, Cat: "node", Ph: "X", Ts: us(n.Started), Tid: n.Lane, Args: args}
			if n.Ended.IsZero() {
				ev.Ph = "B" // a snapshot: the node has not ended
			} else {
				dur := float64(n.Duration()) / float64(time.Microsecond)
				ev.Dur = &dur
			}
			nodes = append(nodes, ev)
			lanes[n.Lane] = true
		case !n.Ended.IsZero() && !t.start.IsZero():
			nodes = append(nodes, traceEvent{Name: name, Cat: "node", Ph: "i", Ts: us(n.Ended), Tid: 0, Scope: "t", Args: args})
			notRun = true
		}
	}
	if path == "" || len(nodes) > 0 {
		t.pids++
		pid := t.pids
		meta := func(name string, tid int, value string) traceEvent {
			return traceEvent{Name: name, Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": value}}
		}
		process := "asynctool run"
		if path != "" {
			process = "sub-run of " + strings.TrimSuffix(path, "/")
		}
		t.meta = append(t.meta, meta("process_name", 0, process))
		if notRun {
			t.meta = append(t.meta, meta("thread_name", 0, "not run"))
		}
		for lane := range maxLane(lanes) + 1 {
			if lanes[lane] {
				t.meta = append(t.meta, meta("thread_name", lane, "lane "+strconv.Itoa(lane)))
			}
		}
		for k := range nodes {
			nodes[k].Pid = pid
		}
		t.nodes = append(t.nodes, nodes...)
	}
	for i := range rep.Nodes {
		if n := &rep.Nodes[i]; n.Sub != nil {
			if err := t.add(n.Sub, path+traceID(n)+"/"); err != nil {
				return err
			}
		}
	}
	return nil
}

// traceID is node n's part of its name in a Chrome trace: its display id
// (quoted, as by [strconv.Quote], when it starts with '#' or '"' or holds
// bytes that are not UTF-8, which JSON turns into U+FFFD, whatever they
// are), or the id quoted when it holds a '/', which joins the ids of a
// path.
func traceID(n *NodeReport) string {
	if strings.ContainsRune(n.ID, '/') {
		return strconv.Quote(n.ID)
	}
	return displayID(n)
}

// quotedOnce quotes name, a trace event's name, for an error message,
// unless a part of it is quoted already (see traceID): quoting it again
// would escape those quotes.
func quotedOnce(name string) string {
	if strings.ContainsRune(name, '"') {
		return name
	}
	return strconv.Quote(name)
}

func maxLane(lanes map[int]bool) int {
	m := -1
	for l := range lanes {
		m = max(m, l)
	}
	return m
}
