package asynctool_test

import (
	"strings"
	"testing"

	"github.com/asynctool-go/asynctool"
	"github.com/stretchr/testify/assert"
)

// TestS18DOTLabelKeepsAmpersands: Graphviz reads HTML entities in quoted
// labels, so a node id holding one ("R&amp;D", "&#65;") was drawn as
// another text ("R&D", "A"), and "&#1;" put a control character into
// the SVG, which no XML parser then accepts. dotQuote now escapes '&'.
func TestS18DOTLabelKeepsAmpersands(t *testing.T) {
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
