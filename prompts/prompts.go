// Package prompts holds ftchat's system prompts and tool descriptions as
// embedded text files, rendered with facts about the workspace (directory,
// OS, date, git branch and status). The words live in the .md files so they
// can be read and tuned without touching code.
package prompts

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"runtime"
	"strings"
	"text/template"
	"time"
)

//go:embed agent.md chat.md tools.md tools/*.md
var files embed.FS

var templates = template.Must(template.New("").Option("missingkey=error").ParseFS(files, "agent.md", "chat.md", "tools.md"))

// Facts describe the workspace the prompts talk about.
type Facts struct {
	Cwd       string
	OS, Arch  string
	Date      string // YYYY-MM-DD
	GitBranch string // "" when not a git repository or git is absent
	GitStatus string // `git status --short`, at most MaxStatusLines lines
}

// MaxStatusLines bounds the git status in the prompt: a small model's
// context is precious, and the agent can run git itself.
const MaxStatusLines = 10

// gitTimeout keeps a slow or hung git from delaying startup.
const gitTimeout = 2 * time.Second

// Gather collects the facts for dir. A missing git, or a directory that is
// not a repository, leaves the git fields empty. Nothing the repository
// configures is run (see git.go).
func Gather(ctx context.Context, dir string, now time.Time) Facts {
	f := Facts{Cwd: dir, OS: runtime.GOOS, Arch: runtime.GOARCH, Date: now.Format("2006-01-02")}
	r, ok := findRepo(dir)
	if !ok {
		return f
	}
	f.GitBranch = r.branch()
	c, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	if head, total, ok := r.status(c, dir); ok {
		f.GitStatus = capLines(head, total, MaxStatusLines)
	}
	return f
}

// capLines keeps the first n of the total lines whose head is s.
func capLines(s string, total, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if s == "" || total == 0 {
		return ""
	}
	if total <= n && len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	lines = lines[:min(n, len(lines))]
	return strings.Join(lines, "\n") + fmt.Sprintf("\n... and %d more", total-len(lines))
}

// Agent is the coding agent's system prompt.
func Agent(f Facts) (string, error) { return render("agent.md", f) }

// Chat is the plain chat system prompt.
func Chat(f Facts) (string, error) { return render("chat.md", f) }

// ToolsBlock is the tool section the engine appends to the system prompt
// for models whose chat template cannot show tools: each signature is one
// JSON line, and calls are asked for in the Hermes <tool_call> format,
// which the engine then parses.
func ToolsBlock(signatures []string) (string, error) { return render("tools.md", signatures) }

// Tool is the description of the named tool (tools/<name>.md).
func Tool(name string) (string, error) {
	b, err := files.ReadFile("tools/" + name + ".md")
	if err != nil {
		return "", fmt.Errorf("prompts: no description for tool %q (want prompts/tools/%s.md)", name, name)
	}
	return strings.TrimSpace(string(b)), nil
}

func render(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("prompts: %s: %w", name, err)
	}
	return strings.TrimSpace(b.String()), nil
}
