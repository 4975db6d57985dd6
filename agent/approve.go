package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Decision is the user's answer to an approval request.
type Decision int

const (
	Deny         Decision = iota
	AllowOnce             // this call only
	AllowSession          // this call and every later call of the same tool
)

func (d Decision) String() string {
	switch d {
	case AllowOnce:
		return "allowed once"
	case AllowSession:
		return "allowed for this session"
	}
	return "denied"
}

// Approver decides whether a plan that changes something may run. The
// preview (a unified diff, or the command) is in p.Preview.
type Approver interface {
	Approve(ctx context.Context, p *Plan) (Decision, error)
}

// DenyAll refuses everything: the non-interactive mode without --yolo.
type DenyAll struct{}

func (DenyAll) Approve(context.Context, *Plan) (Decision, error) { return Deny, nil }

// AllowAll approves everything: --yolo.
type AllowAll struct{}

func (AllowAll) Approve(context.Context, *Plan) (Decision, error) { return AllowOnce, nil }

// permissions remembers "allow for this session" per tool in front of an
// Approver.
type permissions struct {
	mu       sync.Mutex
	approver Approver
	session  map[string]bool
}

func (p *permissions) check(ctx context.Context, plan *Plan) (Decision, error) {
	if !plan.NeedsApproval {
		return AllowOnce, nil
	}
	p.mu.Lock()
	ok := p.session[plan.Tool]
	p.mu.Unlock()
	if ok {
		return AllowSession, nil
	}
	if p.approver == nil {
		return Deny, nil
	}
	d, err := p.approver.Approve(ctx, plan)
	if err != nil {
		return Deny, err
	}
	if d == AllowSession {
		p.mu.Lock()
		if p.session == nil {
			p.session = map[string]bool{}
		}
		p.session[plan.Tool] = true
		p.mu.Unlock()
	}
	return d, nil
}

// LineApprover asks on a terminal, line by line: it shows the summary and
// the preview, then reads o (once), s (session) or d (deny). Anything else
// asks again; end of input denies.
type LineApprover struct {
	In  io.Reader // the terminal, e.g. /dev/tty
	Out io.Writer

	once sync.Once
	r    *bufio.Reader
}

func (a *LineApprover) Approve(ctx context.Context, p *Plan) (Decision, error) {
	a.once.Do(func() { a.r = bufio.NewReader(a.In) })
	fmt.Fprintf(a.Out, "\n── %s needs your approval: %s\n", p.Tool, p.Summary)
	if p.Preview != "" {
		io.WriteString(a.Out, p.Preview)
		if !strings.HasSuffix(p.Preview, "\n") {
			io.WriteString(a.Out, "\n")
		}
	}
	for {
		fmt.Fprintf(a.Out, "Allow? [o]nce / [s]ession (all %s calls) / [d]eny: ", p.Tool)
		line, err := a.r.ReadString('\n')
		if ctx.Err() != nil {
			return Deny, ctx.Err()
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "o", "once", "y", "yes":
			return AllowOnce, nil
		case "s", "session":
			return AllowSession, nil
		case "d", "deny", "n", "no":
			return Deny, nil
		}
		if err != nil { // EOF or a closed terminal: the safe answer
			fmt.Fprintln(a.Out)
			return Deny, nil
		}
	}
}
