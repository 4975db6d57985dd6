package agent

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/prompts"
)

// Limits bound what tools return to the model (a small model's context is
// a few thousand tokens) and how long a command may run.
type Limits struct {
	ReadBytes    int // read_file output
	ListEntries  int // list and glob results
	GrepMatches  int
	GrepFileSize int64 // files larger than this are not searched
	ShellOutput  int   // run_shell output, head and tail kept
	ShellTimeout int   // seconds, default for run_shell
	ShellMaxTime int   // seconds, the most a call may ask for
	FileSize     int64 // read_file reads at most this much; edit and write_file refuse larger files
	WalkEntries  int   // directory entries a list, glob or grep reads at most
	WalkTime     time.Duration
}

// DefaultLimits suit a model with an 8K context.
var DefaultLimits = Limits{
	ReadBytes: 8 << 10, ListEntries: 200, GrepMatches: 100, GrepFileSize: 4 << 20,
	ShellOutput: 8 << 10, ShellTimeout: 30, ShellMaxTime: 300,
	FileSize: 4 << 20, WalkEntries: 200_000, WalkTime: 10 * time.Second,
}

// Plan is a validated tool call, ready to run. Planning has no side
// effects; for tools that change something it carries what the user is
// shown before approving.
type Plan struct {
	Tool          string
	NeedsApproval bool
	Summary       string // one line: "edit main.go", "run_shell: go test ./..."
	Preview       string // unified diff, or the command; "" when none
	run           func(ctx context.Context) (string, error)
}

// Run executes the plan.
func (p *Plan) Run(ctx context.Context) (string, error) { return p.run(ctx) }

type toolSpec struct {
	name     string
	params   map[string]any
	approval bool
	plan     func(t *Tools, args map[string]any) (*Plan, error)
}

// Tools is the agent's tool set over one workspace.
type Tools struct {
	ws       *Workspace
	limits   Limits
	shellEnv []string // extra variables run_shell passes on (AllowShellEnv)
	specs    []toolSpec
	defs     []engine.Tool
}

// NewTools builds the tool set; descriptions come from prompts/tools.
func NewTools(ws *Workspace, limits Limits) (*Tools, error) {
	// Limits set before a bound existed keep the default for it.
	if limits.FileSize <= 0 {
		limits.FileSize = DefaultLimits.FileSize
	}
	if limits.WalkEntries <= 0 {
		limits.WalkEntries = DefaultLimits.WalkEntries
	}
	if limits.WalkTime <= 0 {
		limits.WalkTime = DefaultLimits.WalkTime
	}
	t := &Tools{ws: ws, limits: limits, specs: specs()}
	for _, s := range t.specs {
		desc, err := prompts.Tool(s.name)
		if err != nil {
			return nil, err
		}
		t.defs = append(t.defs, engine.Tool{Name: s.name, Description: desc, Parameters: s.params})
	}
	return t, nil
}

// Defs are the tool definitions passed to the model.
func (t *Tools) Defs() []engine.Tool { return t.defs }

// Workspace is the tools' workspace.
func (t *Tools) Workspace() *Workspace { return t.ws }

// Plan validates a call: unknown tools, missing or mistyped arguments and
// refused paths are errors whose text is meant for the model.
func (t *Tools) Plan(call engine.ToolCall) (*Plan, error) {
	for _, s := range t.specs {
		if s.name == call.Name {
			if err := checkArgs(s.params, call.Arguments); err != nil {
				return nil, fmt.Errorf("%s: %w", call.Name, err)
			}
			p, err := s.plan(t, call.Arguments)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", call.Name, err)
			}
			p.Tool, p.NeedsApproval = s.name, s.approval
			return p, nil
		}
	}
	names := make([]string, len(t.specs))
	for i, s := range t.specs {
		names[i] = s.name
	}
	return nil, fmt.Errorf("there is no tool %q; the tools are %s", call.Name, strings.Join(names, ", "))
}

func specs() []toolSpec {
	// Parameter descriptions only where the name is not enough: every
	// token here is paid in each prompt of a small model.
	str := func(desc string) map[string]any {
		if desc == "" {
			return map[string]any{"type": "string"}
		}
		return map[string]any{"type": "string", "description": desc}
	}
	integer := func(desc string) map[string]any {
		if desc == "" {
			return map[string]any{"type": "integer"}
		}
		return map[string]any{"type": "integer", "description": desc}
	}
	obj := func(props map[string]any, required ...string) map[string]any {
		m := map[string]any{"type": "object", "properties": props}
		if len(required) > 0 {
			req := make([]any, len(required))
			for i, r := range required {
				req[i] = r
			}
			m["required"] = req
		}
		return m
	}
	return []toolSpec{
		{name: "read_file", plan: planRead, params: obj(map[string]any{
			"path":       str(""),
			"start_line": integer("from 1"),
			"end_line":   integer(""),
		}, "path")},
		{name: "list", plan: planList, params: obj(map[string]any{
			"path": str("directory, default ."),
		})},
		{name: "glob", plan: planGlob, params: obj(map[string]any{
			"pattern": str(""),
		}, "pattern")},
		{name: "grep", plan: planGrep, params: obj(map[string]any{
			"pattern": str(""),
			"path":    str("default ."),
			"glob":    str("only files matching this glob"),
		}, "pattern")},
		{name: "write_file", plan: planWrite, approval: true, params: obj(map[string]any{
			"path":    str(""),
			"content": str(""),
		}, "path", "content")},
		{name: "edit", plan: planEdit, approval: true, params: obj(map[string]any{
			"path":     str(""),
			"old_text": str(""),
			"new_text": str(""),
		}, "path", "old_text", "new_text")},
		{name: "run_shell", plan: planShell, approval: true, params: obj(map[string]any{
			"command": str(""),
			"timeout": integer("seconds, default 30"),
		}, "command")},
	}
}

// checkArgs checks required arguments and the types the schema names, so
// the model gets one clear message instead of a tool misbehaving.
func checkArgs(schema map[string]any, args map[string]any) error {
	props, _ := schema["properties"].(map[string]any)
	req, _ := schema["required"].([]any)
	for _, r := range req {
		if _, ok := args[r.(string)]; !ok {
			return fmt.Errorf("missing argument %q (arguments: %s)", r, argNames(props))
		}
	}
	for k, v := range args {
		p, ok := props[k].(map[string]any)
		if !ok {
			return fmt.Errorf("unknown argument %q (arguments: %s)", k, argNames(props))
		}
		switch p["type"] {
		case "string":
			if _, ok := v.(string); !ok {
				return fmt.Errorf("argument %q must be a string", k)
			}
		case "integer":
			if _, err := toInt(v); err != nil {
				return fmt.Errorf("argument %q must be an integer", k)
			}
		}
	}
	return nil
}

func argNames(props map[string]any) string {
	var names []string
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func toInt(v any) (int, error) {
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<31 {
			return 0, fmt.Errorf("not an integer")
		}
		return int(x), nil
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case string: // small models often quote numbers
		return strconv.Atoi(strings.TrimSpace(x))
	}
	return 0, fmt.Errorf("not an integer")
}

func strArg(args map[string]any, k, def string) string {
	if s, ok := args[k].(string); ok {
		return s
	}
	return def
}

func intArg(args map[string]any, k string, def int) int {
	if v, ok := args[k]; ok {
		if n, err := toInt(v); err == nil {
			return n
		}
	}
	return def
}
