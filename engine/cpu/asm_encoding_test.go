package cpu

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	yReg     = regexp.MustCompile(`\bY([0-9]|1[0-5])\b`)
	xReg     = regexp.MustCompile(`\bX([0-9]|1[0-5])\b`)
	macroDef = regexp.MustCompile(`^#define\s+(\w+)(?:\(([^)]*)\))?\s*(.*)$`)
	macroUse = regexp.MustCompile(`^(\w+)(?:\((.*)\))?$`)
)

// TestAssemblyHasNoSSEAVXTransitions guards every amd64 assembly file of
// the module against the SSE/AVX transition penalty of Intel CPUs (issue
// 15 item 1: fp8 decode ~4x slower than bf16): a function that touches a
// Y register may use only VEX-encoded instructions on X registers (VMOVQ,
// VMOVSS, not MOVQ, MOVSS), and must run VZEROUPPER after its last
// 256-bit instruction before each RET, so Go's legacy-SSE code that runs
// next finds clean upper halves. Macros are expanded with their arguments.
func TestAssemblyHasNoSSEAVXTransitions(t *testing.T) {
	root := moduleRoot(t)
	var files []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_amd64.s") {
			files = append(files, p)
		}
		return nil
	})
	if len(files) == 0 {
		t.Fatal("no amd64 assembly found under", root)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		for _, fn := range asmFunctions(t, f) {
			usesY := false
			for _, ins := range fn.body {
				usesY = usesY || yReg.MatchString(ins)
			}
			if !usesY {
				continue
			}
			dirty := false
			for _, ins := range fn.body {
				op := strings.Fields(ins)[0]
				switch {
				case op == "VZEROUPPER":
					dirty = false
				case op == "RET":
					if dirty {
						t.Errorf("%s: %s returns with dirty YMM upper halves (no VZEROUPPER after its last 256-bit instruction)", rel, fn.name)
					}
				case yReg.MatchString(ins):
					dirty = true
				}
				if !strings.HasPrefix(op, "V") && xReg.MatchString(ins) {
					t.Errorf("%s: %s uses AVX but has legacy-SSE %q: use its VEX form", rel, fn.name, ins)
				}
			}
		}
	}
}

type asmFunc struct {
	name string
	body []string // instructions, macros expanded, labels and comments dropped
}

// asmFunctions splits an assembly file into its TEXT functions.
func asmFunctions(t *testing.T, path string) []asmFunc {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type macro struct {
		params []string
		body   string
	}
	macros := map[string]macro{}
	var fns []asmFunc
	var expand func(line string, depth int) []string
	expand = func(line string, depth int) []string {
		var out []string
		for _, ins := range strings.Split(line, ";") {
			ins = strings.TrimSpace(ins)
			if ins == "" {
				continue
			}
			if m := macroUse.FindStringSubmatch(ins); m != nil && depth < 8 {
				if mac, ok := macros[m[1]]; ok {
					body := mac.body
					args := strings.Split(m[2], ",")
					for i, p := range mac.params {
						if i < len(args) {
							body = regexp.MustCompile(`\b`+regexp.QuoteMeta(p)+`\b`).ReplaceAllString(body, strings.TrimSpace(args[i]))
						}
					}
					out = append(out, expand(body, depth+1)...)
					continue
				}
			}
			out = append(out, ins)
		}
		return out
	}
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		for strings.HasSuffix(strings.TrimSpace(line), `\`) && sc.Scan() {
			next := sc.Text()
			if i := strings.Index(next, "//"); i >= 0 {
				next = next[:i]
			}
			line = strings.TrimSuffix(strings.TrimSpace(line), `\`) + " " + next
		}
		line = strings.TrimSpace(line)
		if m := macroDef.FindStringSubmatch(line); m != nil {
			var params []string
			for _, p := range strings.Split(m[2], ",") {
				if p = strings.TrimSpace(p); p != "" {
					params = append(params, p)
				}
			}
			macros[m[1]] = macro{params, m[3]}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") || strings.HasSuffix(line, ":") {
			continue
		}
		if strings.HasPrefix(line, "TEXT ") {
			fns = append(fns, asmFunc{name: strings.Fields(line)[1]})
			continue
		}
		if len(fns) > 0 {
			fn := &fns[len(fns)-1]
			fn.body = append(fn.body, expand(line, 0)...)
		}
	}
	return fns
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
