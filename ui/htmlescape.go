package ui

import (
	"bytes"
	"sort"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	gmtext "github.com/yuin/goldmark/text"
)

// htmlParser parses markdown the way glamour does (GFM and definition
// lists), so that escapeHTML finds exactly the nodes glamour would treat
// as HTML.
var htmlParser = goldmark.New(goldmark.WithExtensions(extension.GFM, extension.DefinitionList)).Parser()

// escapeHTML backslash-escapes the '<' that starts each raw HTML node of
// md, so that glamour shows `<div>` or `<tool_call>` as literal text: its
// HTML sanitizer would otherwise drop the tags, and a model's text is
// never meant as markup for the terminal. Code spans and code blocks are
// left alone (a '<' there is already literal). Escaping the start of an
// HTML block turns it into a paragraph whose other tags become inline
// HTML, so this reparses until no HTML node is left (a few rounds at most;
// bounded in case of a surprise).
func escapeHTML(md string) string {
	if !strings.Contains(md, "<") {
		return md
	}
	src := []byte(md)
	for range 8 {
		at := htmlStarts(src)
		if len(at) == 0 {
			break
		}
		out := make([]byte, 0, len(src)+len(at))
		prev := 0
		for _, p := range at {
			out = append(out, src[prev:p]...)
			out = append(out, '\\')
			prev = p
		}
		src = append(out, src[prev:]...)
	}
	return string(src)
}

// htmlStarts returns, in order, the offsets of the '<' that opens each raw
// HTML span and each HTML block of src.
func htmlStarts(src []byte) []int {
	var at []int
	doc := htmlParser.Parse(gmtext.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		var segs *gmtext.Segments
		switch n := n.(type) {
		case *ast.RawHTML:
			segs = n.Segments
		case *ast.HTMLBlock:
			segs = n.Lines()
		default:
			return ast.WalkContinue, nil
		}
		if segs.Len() > 0 {
			s := segs.At(0)
			if i := bytes.IndexByte(src[s.Start:s.Stop], '<'); i >= 0 {
				at = append(at, s.Start+i)
			}
		}
		return ast.WalkSkipChildren, nil
	})
	sort.Ints(at)
	return at
}
