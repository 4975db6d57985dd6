package engine

import "strings"

// toolProps maps each tool to its JSON schema's properties (the XML
// call format types values by them).
func toolProps(tools []Tool) map[string]map[string]any {
	out := make(map[string]map[string]any, len(tools))
	for _, t := range tools {
		props, _ := t.Parameters["properties"].(map[string]any)
		out[t.Name] = props
	}
	return out
}

// complete is told of each call the parser completes, in order; for an
// XML call whose arguments were streamed it returns the delta that makes
// them the call's ArgsJSON (at least the closing brace), or nil.
func (c *callStreamer) complete(tc *ToolCall) *ToolCallDelta {
	idx := c.parsed
	c.parsed++
	if !c.xml || c.xmlAt != idx || c.sent == "" || tc.ArgsJSON == "" {
		return nil
	}
	if len(tc.ArgsJSON) <= len(c.sent) || !strings.HasPrefix(tc.ArgsJSON, c.sent) {
		return nil // not reached: the streamer writes a prefix (FuzzXMLCallStream)
	}
	d := &ToolCallDelta{Index: idx, Args: tc.ArgsJSON[len(c.sent):]}
	c.sent = tc.ArgsJSON
	return d
}

// pushParsed sends one of the parser's events, after the delta that
// completes a streamed XML call's arguments.
func (s *batchSeq) pushParsed(be BatchEvent) {
	if be.Kind == EventToolCall && s.calls != nil {
		if d := s.calls.complete(be.ToolCall); d != nil {
			s.out.push(BatchEvent{Event: Event{Kind: EventToolCallDelta}, CallDelta: d})
		}
	}
	s.out.push(be)
}
