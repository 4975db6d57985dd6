package agent

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

// maxLCSCells bounds the line-LCS table; beyond it the changed middle of
// the file is shown as one replacement (still a correct diff, not minimal).
const maxLCSCells = 4 << 20

type opKind byte

const (
	opEqual opKind = ' '
	opDel   opKind = '-'
	opIns   opKind = '+'
)

type diffOp struct {
	kind opKind
	line string // with its "\n" when it had one
}

// UnifiedDiff renders the change from old to new as a unified diff with
// three lines of context. existed=false shows the old side as /dev/null.
// Identical texts give "(no change)".
func UnifiedDiff(name, old, new string, existed bool) string {
	if old == new {
		return "(no change to " + name + ")\n"
	}
	ops := diffLines(splitLines(old), splitLines(new))
	var b strings.Builder
	from := "a/" + name
	if !existed {
		from = "/dev/null"
	}
	fmt.Fprintf(&b, "--- %s\n+++ b/%s\n", from, name)
	// Walk the ops, cutting hunks where more than 2*context equal lines
	// separate changes.
	oldLine, newLine := 1, 1
	i := 0
	for i < len(ops) {
		// find next change
		j := i
		for j < len(ops) && ops[j].kind == opEqual {
			j++
		}
		if j == len(ops) {
			break
		}
		// hunk starts diffContext equal lines before j
		start := max(i, j-diffContext)
		for k := i; k < start; k++ {
			oldLine++
			newLine++
		}
		// extend the hunk until a run of > 2*context equal lines or the end
		end := j
		for end < len(ops) {
			if ops[end].kind != opEqual {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == opEqual {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(end+diffContext, run)
				break
			}
			end = run
		}
		oc, nc := 0, 0
		for _, op := range ops[start:end] {
			if op.kind != opIns {
				oc++
			}
			if op.kind != opDel {
				nc++
			}
		}
		fmt.Fprintf(&b, "@@ -%s +%s @@\n", hunkRange(oldLine, oc), hunkRange(newLine, nc))
		for _, op := range ops[start:end] {
			b.WriteByte(byte(op.kind))
			b.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				b.WriteString("\n\\ No newline at end of file\n")
			}
		}
		oldLine += oc
		newLine += nc
		i = end
	}
	return b.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start-1)
	}
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// diffLines is a line diff: common prefix and suffix, then an LCS of the
// middle when it is small enough.
func diffLines(a, b []string) []diffOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []diffOp
	for _, l := range a[:pre] {
		ops = append(ops, diffOp{opEqual, l})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if (len(ma)+1)*(len(mb)+1) <= maxLCSCells {
		ops = append(ops, lcsOps(ma, mb)...)
	} else {
		for _, l := range ma {
			ops = append(ops, diffOp{opDel, l})
		}
		for _, l := range mb {
			ops = append(ops, diffOp{opIns, l})
		}
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{opEqual, l})
	}
	return ops
}

func lcsOps(a, b []string) []diffOp {
	n, m := len(a), len(b)
	// t[i][j] = LCS length of a[i:], b[j:]
	t := make([]int32, (n+1)*(m+1))
	at := func(i, j int) int32 { return t[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				t[i*(m+1)+j] = at(i+1, j+1) + 1
			} else {
				t[i*(m+1)+j] = max(at(i+1, j), at(i, j+1))
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{opEqual, a[i]})
			i++
			j++
		case at(i+1, j) >= at(i, j+1):
			ops = append(ops, diffOp{opDel, a[i]})
			i++
		default:
			ops = append(ops, diffOp{opIns, b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, diffOp{opDel, a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, diffOp{opIns, b[j]})
	}
	return ops
}
