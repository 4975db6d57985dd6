package chat

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// BenchmarkRenderQwen3Tools renders the Qwen3 template over the tools
// fixture conversation (8 messages, 2 tools, 3 calls): the per-turn cost of
// building a prompt.
func BenchmarkRenderQwen3Tools(b *testing.B) {
	src, err := os.ReadFile("testdata/templates/qwen3.jinja")
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := New(string(src))
	if err != nil {
		b.Fatal(err)
	}
	var convs map[string]conversation
	data, _ := os.ReadFile("testdata/conversations.json")
	if err := json.Unmarshal(data, &convs); err != nil {
		b.Fatal(err)
	}
	conv := convs["tools"]
	opts := RenderOptions{AddGenerationPrompt: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(conv.Messages, conv.Tools, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamParser feeds a typical Qwen3 reply (thinking, text, a
// call) in 4-byte deltas, about one token each.
func BenchmarkStreamParser(b *testing.B) {
	reply := "<think>\n" + strings.Repeat("I should look at the file first. ", 40) + "\n</think>\n\n" +
		strings.Repeat("Here is what I found. ", 40) + "\n" + weatherCall
	var deltas []string
	for i := 0; i < len(reply); i += 4 {
		deltas = append(deltas, reply[i:min(len(reply), i+4)])
	}
	b.SetBytes(int64(len(reply)))
	b.ReportAllocs()
	for b.Loop() {
		p := NewStreamParser(ToolHermes, false)
		for _, d := range deltas {
			p.Feed(d)
		}
		p.Flush()
	}
}

// BenchmarkStreamParserLargeCall: a 256 KiB write_file call streamed in
// 4-byte deltas; the cost per byte must not grow with the call's length.
func BenchmarkStreamParserLargeCall(b *testing.B) {
	content := strings.Repeat("fmt.Println(\\\"hello\\\")\\n", 256<<10/24)
	reply := "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"main.go\", \"content\": \"" + content + "\"}}\n</tool_call>"
	var deltas []string
	for i := 0; i < len(reply); i += 4 {
		deltas = append(deltas, reply[i:min(len(reply), i+4)])
	}
	b.SetBytes(int64(len(reply)))
	for b.Loop() {
		p := NewStreamParser(ToolHermes, false)
		var segs []Segment
		for _, d := range deltas {
			segs = append(segs, p.Feed(d)...)
		}
		segs = append(segs, p.Flush()...)
		if len(segs) != 1 || segs[0].Kind != SegToolCall {
			b.Fatalf("got %v", segs)
		}
	}
}
