package server

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strings"

	"github.com/ftchat/ftchat/engine"
)

// decodeJSON decodes one JSON object into v, with errors that name the
// field and what it should be.
func decodeJSON(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "empty request body: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "invalid JSON: data after the request object")
	}
	return nil
}

func jsonError(err error) *apiError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return badRequest("", "invalid request: the body must be a JSON object, not %s", te.Value)
		}
		return badRequest(field, "%s: expected %s, got %s", field, jsonTypeName(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return badRequest("", "invalid JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "invalid JSON: the body ends before the object does")
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return badRequest("", "invalid JSON: %v", err)
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "int", "int64", "int32", "uint64", "float64", "float32":
		return "a number"
	}
	return kind
}

// stringOrList reads a JSON string or array of strings (OpenAI's stop).
func stringOrList(raw json.RawMessage, param string) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(param, "%s: expected a string or an array of strings", param)
	}
	return list, nil
}

// checkStops bounds the stop sequences and drops empty ones.
func (l Limits) checkStops(stops []string, param string) ([]string, *apiError) {
	if len(stops) > l.MaxStops {
		return nil, badRequest(param, "%s: %d stop sequences; at most %d", param, len(stops), l.MaxStops)
	}
	var out []string
	for i, s := range stops {
		if len(s) > l.MaxStopBytes {
			return nil, badRequest(param, "%s[%d]: %d bytes; a stop sequence has at most %d", param, i, len(s), l.MaxStopBytes)
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// checkMaxTokens reads max_tokens-like fields: positive when set.
func checkMaxTokens(v *int, param string) (int, *apiError) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, badRequest(param, "%s %d: must be at least 1", param, *v)
	}
	return *v, nil
}

func checkRange(v *float64, param string, lo, hi float64) *apiError {
	if v != nil && (math.IsNaN(*v) || *v < lo || *v > hi) {
		return badRequest(param, "%s %v: must be between %g and %g", param, *v, lo, hi)
	}
	return nil
}

// toolName checks a function name as OpenAI does: 1-64 of a-z A-Z 0-9 _ -.
func toolName(name, param string) *apiError {
	if name == "" || len(name) > 64 {
		return badRequest(param, "%s %q: a tool name has 1 to 64 characters", param, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return badRequest(param, "%s %q: a tool name may use only letters, digits, _ - and .", param, name)
		}
	}
	return nil
}

// schemaObject reads a JSON schema (parameters, input_schema).
func schemaObject(raw json.RawMessage, param string) (map[string]any, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badRequest(param, "%s: expected a JSON schema object", param)
	}
	return m, nil
}

func randomSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// sampling builds engine sampling from the API's fields: greedy at
// temperature 0, the API's defaults (temperature 1, no top-p/top-k)
// otherwise, and a random seed unless one is given.
func sampling(temp, topP *float64, topK *int, seed *int64) engine.Sampling {
	s := engine.Sampling{Temperature: 1, RepeatPenalty: 1}
	if temp != nil {
		s.Temperature = float32(*temp)
	}
	if topP != nil {
		if *topP == 0 {
			s.Temperature = 0 // only the most likely token is left
		} else if *topP < 1 {
			s.TopP = float32(*topP)
		}
	}
	if topK != nil {
		s.TopK = *topK
	}
	if seed != nil {
		s.Seed = uint64(*seed)
	} else {
		s.Seed = randomSeed()
	}
	return s
}

// plainRoleOK is a role the engine renders.
func checkRole(role, param string) *apiError {
	switch role {
	case "system", "user", "assistant", "tool":
		return nil
	case "":
		return badRequest(param, "%s: role is required", param)
	}
	return badRequest(param, "%s %q: supported roles are system, developer, user, assistant and tool", param, truncate(role, 40))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
