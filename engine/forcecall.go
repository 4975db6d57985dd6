package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/sample"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// ForceCall names the tool a forced call must use; Name "" allows any
// offered tool.
type ForceCall struct{ Name string }

// constraint masks a sequence's logits before sampling and follows the
// sampled tokens (sample.JSONConstraint, sample.CallConstraint).
type constraint interface {
	Mask(lg []float32)
	Accept(id int32) error
}

// forceCall builds the constraint of a forced call of req's tools (see
// BatchRequest.ForceCall); prompt is the rendered prompt.
func (b *Batcher) forceCall(req Request, fc *ForceCall, jsonFormat bool, prompt string) (constraint, error) {
	if jsonFormat {
		return nil, errors.New("a JSON response format cannot be combined with a forced tool call")
	}
	choices, err := b.e.forcedCallChoices(req.Tools, fc.Name)
	if err != nil {
		return nil, err
	}
	c, err := sample.NewCallConstraint(b.callVocab(), choices, chat.PromptOpensThinking(prompt))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// callVocab is jsonVocab with the user-defined tokens too: templates'
// tags such as <tool_call> and </think> are often such tokens.
func (b *Batcher) callVocab() *sample.Vocab {
	b.callOnce.Do(func() {
		tok := b.e.tok
		b.cvocab = sample.NewVocab(tok.VocabSize(), tok.TokenBytes, func(id int32) bool {
			t := tok.Type(id)
			return t == tokenizer.TypeNormal || t == tokenizer.TypeByte || t == tokenizer.TypeUserDefined
		}, tok.EOGs())
	})
	return b.cvocab
}

// forcedCallChoices writes the start of a call of each allowed tool in the
// template's call format (name "": every tool).
func (e *Engine) forcedCallChoices(tools []Tool, name string) ([]sample.CallChoice, error) {
	ct, ok := e.tmpl.(*chatTemplate)
	if !ok {
		return nil, errors.New("a forced tool call needs a chat template")
	}
	if len(tools) == 0 {
		return nil, errors.New("a forced tool call needs tools")
	}
	var out []sample.CallChoice
	for _, t := range tools {
		if name != "" && t.Name != name {
			continue
		}
		args := forcedArgsSchema(t.Parameters)
		quoted, _ := json.Marshal(t.Name)
		switch ct.format {
		case chat.ToolHermes, chat.ToolNone: // ToolNone: Hermes, inlined
			out = append(out, sample.CallChoice{Prefix: "<tool_call>\n{\"name\": " + string(quoted) + `, "arguments": `, Args: args, Suffix: "}\n</tool_call>"})
		case chat.ToolLlama3JSON:
			out = append(out, sample.CallChoice{Prefix: `{"name": ` + string(quoted) + `, "parameters": `, Args: args, Suffix: "}"})
		case chat.ToolQwenXML:
			// The arguments are tagged text, typed by the schema after the
			// fact: only the call's opening is constrained.
			out = append(out, sample.CallChoice{Prefix: "<tool_call>\n<function=" + t.Name + ">\n"})
		default:
			return nil, fmt.Errorf("a forced tool call is not supported for the %s call format", ct.format)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tool_choice names %q, which is not among the tools", name)
	}
	return out, nil
}

// forcedArgsSchema compiles a tool's parameter schema for a forced call.
// Keywords the constraint cannot enforce are dropped where that only
// widens what is accepted (maxLength, minimum, format...): the types,
// properties and required keys still hold. A schema that does not compile
// even so (anyOf, type lists) gives any JSON object.
func forcedArgsSchema(params map[string]any) *sample.Schema {
	if params == nil {
		return sample.AnyJSONObject()
	}
	m, copied := params, false
	for range 32 {
		s, err := sample.CompileJSONSchema(m)
		if err == nil {
			return s
		}
		var ue *sample.UnsupportedSchemaError
		if !errors.As(err, &ue) || len(ue.Keywords) == 0 {
			break
		}
		if !copied {
			m, copied = deepCopyMap(params), true
		}
		node := schemaAt(m, ue.Path)
		if node == nil {
			break
		}
		for _, k := range ue.Keywords {
			delete(node, strings.Fields(k)[0]) // "additionalProperties (other than false)"
		}
	}
	return sample.AnyJSONObject()
}

// schemaAt finds the schema node at a JSON pointer of CompileJSONSchema's
// errors (properties/NAME and items steps).
func schemaAt(m map[string]any, path string) map[string]any {
	if path == "" {
		return m
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i := 0; i < len(parts); i++ {
		switch parts[i] {
		case "items":
			m, _ = m["items"].(map[string]any)
		case "properties":
			if i+1 >= len(parts) {
				return nil
			}
			props, _ := m["properties"].(map[string]any)
			m, _ = props[parts[i+1]].(map[string]any)
			i++
		default:
			return nil
		}
		if m == nil {
			return nil
		}
	}
	return m
}

func deepCopyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			out[k] = deepCopyMap(x)
		case []any:
			out[k] = slices.Clone(x)
		default:
			out[k] = v
		}
	}
	return out
}
