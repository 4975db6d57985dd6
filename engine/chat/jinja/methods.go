package jinja

import (
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python methods that chat templates call on str, dict and list values.
// Mutating methods are absent, as in jinja2's ImmutableSandboxedEnvironment.

func wantArgs(name string, args []any, lo, hi int) error {
	if len(args) < lo || len(args) > hi {
		if lo == hi {
			return fmt.Errorf("%s() takes %d arguments, got %d", name, lo, len(args))
		}
		return fmt.Errorf("%s() takes %d to %d arguments, got %d", name, lo, hi, len(args))
	}
	return nil
}

func strArg(name string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		if u, isU := v.(Undefined); isU {
			return "", fmt.Errorf("%s", u.msg())
		}
		return "", fmt.Errorf("%s() argument must be str, not %s", name, typeName(v))
	}
	return s, nil
}

func pyStrip(s string, chars any, left, right bool) (string, error) {
	var f func(rune) bool
	switch c := chars.(type) {
	case nil:
		f = unicode.IsSpace
	case string:
		f = func(r rune) bool { return strings.ContainsRune(c, r) }
	default:
		return "", fmt.Errorf("strip arg must be None or str, not %s", typeName(chars))
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s, nil
}

// pySplit is str.split / str.rsplit.
func pySplit(s string, sep any, maxsplit int64, fromRight bool) ([]any, error) {
	var parts []string
	switch sp := sep.(type) {
	case nil:
		fields := strings.FieldsFunc(s, unicode.IsSpace)
		if maxsplit >= 0 && int64(len(fields)) > maxsplit+1 {
			// keep the remainder unsplit (leading whitespace of it stripped)
			if !fromRight {
				rest := s
				parts = nil
				for k := int64(0); k < maxsplit; k++ {
					rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
					i := strings.IndexFunc(rest, unicode.IsSpace)
					parts = append(parts, rest[:i])
					rest = rest[i:]
				}
				parts = append(parts, strings.TrimLeftFunc(rest, unicode.IsSpace))
			} else {
				rest := s
				var rev []string
				for k := int64(0); k < maxsplit; k++ {
					rest = strings.TrimRightFunc(rest, unicode.IsSpace)
					i := strings.LastIndexFunc(rest, unicode.IsSpace)
					rev = append(rev, rest[i+1:])
					rest = rest[:i+1]
				}
				rest = strings.TrimRightFunc(rest, unicode.IsSpace)
				parts = append(parts, rest)
				for k := len(rev) - 1; k >= 0; k-- {
					parts = append(parts, rev[k])
				}
			}
		} else {
			parts = fields
		}
	case string:
		if sp == "" {
			return nil, fmt.Errorf("empty separator")
		}
		n := -1
		if maxsplit >= 0 {
			n = int(maxsplit) + 1
		}
		if !fromRight || n < 0 {
			parts = strings.SplitN(s, sp, n)
		} else {
			var rev []string
			rest := s
			for len(rev) < n-1 {
				i := strings.LastIndex(rest, sp)
				if i < 0 {
					break
				}
				rev = append(rev, rest[i+len(sp):])
				rest = rest[:i]
			}
			parts = append(parts, rest)
			for k := len(rev) - 1; k >= 0; k-- {
				parts = append(parts, rev[k])
			}
		}
	default:
		return nil, fmt.Errorf("must be str or None, not %s", typeName(sep))
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prevCased {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
			prevCased = true
		} else {
			b.WriteRune(r)
			prevCased = false
		}
	}
	return b.String()
}

func prefixMatch(name string, s string, arg any, fn func(string, string) bool) (bool, error) {
	switch p := unTuple(arg).(type) {
	case string:
		return fn(s, p), nil
	case []any:
		for _, e := range p {
			ps, err := strArg(name, e)
			if err != nil {
				return false, err
			}
			if fn(s, ps) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(arg))
}

func allRunes(s string, f func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

func intArg(name string, v any) (int64, error) {
	i, _, isF, ok := asNumber(v)
	if !ok || isF {
		return 0, fmt.Errorf("%s(): expected an integer, got %s", name, typeName(v))
	}
	return i, nil
}

func (r *renderer) strMethod(s string, name string) Func {
	m := func(fn func(args []any, kw map[string]any) (any, error)) Func { return Func(fn) }
	switch name {
	case "strip", "lstrip", "rstrip":
		return m(func(args []any, kw map[string]any) (any, error) {
			if err := wantArgs(name, args, 0, 1); err != nil {
				return nil, err
			}
			return pyStrip(s, param(args, kw, 0, "chars", nil), name != "rstrip", name != "lstrip")
		})
	case "split", "rsplit":
		return m(func(args []any, kw map[string]any) (any, error) {
			if err := wantArgs(name, args, 0, 2); err != nil {
				return nil, err
			}
			ms, err := intArg(name, param(args, kw, 1, "maxsplit", int64(-1)))
			if err != nil {
				return nil, err
			}
			sep := param(args, kw, 0, "sep", nil)
			parts := int64(fieldCount(s)) // sep None: whitespace runs
			if sp, ok := sep.(string); ok && sp != "" {
				parts = int64(strings.Count(s, sp)) + 1
			}
			if err := r.growN(parts, 2*elemSize, "%s() of a string of %d bytes", name, len(s)); err != nil {
				return nil, err
			}
			return pySplit(s, sep, ms, name == "rsplit")
		})
	case "splitlines":
		return m(func(args []any, kw map[string]any) (any, error) {
			keep := truthy(param(args, kw, 0, "keepends", false))
			if err := r.growN(int64(strings.Count(s, "\n")+strings.Count(s, "\r")+1), 2*elemSize, "splitlines() of a string of %d bytes", len(s)); err != nil {
				return nil, err
			}
			var out []any
			rest := s
			for rest != "" {
				i := strings.IndexAny(rest, "\n\r")
				if i < 0 {
					out = append(out, rest)
					break
				}
				end := i + 1
				if rest[i] == '\r' && end < len(rest) && rest[end] == '\n' {
					end++
				}
				if keep {
					out = append(out, rest[:end])
				} else {
					out = append(out, rest[:i])
				}
				rest = rest[end:]
			}
			if out == nil {
				out = []any{}
			}
			return out, nil
		})
	case "startswith", "endswith":
		return m(func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 1); err != nil {
				return nil, err
			}
			fn := strings.HasPrefix
			if name == "endswith" {
				fn = strings.HasSuffix
			}
			return prefixMatch(name, s, args[0], fn)
		})
	case "replace":
		return m(func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 2, 3); err != nil {
				return nil, err
			}
			o, err := strArg(name, args[0])
			if err != nil {
				return nil, err
			}
			n, err := strArg(name, args[1])
			if err != nil {
				return nil, err
			}
			cnt := int64(-1)
			if len(args) == 3 {
				if cnt, err = intArg(name, args[2]); err != nil {
					return nil, err
				}
			}
			return r.replace(s, o, n, cnt)
		})
	case "upper", "lower", "title", "capitalize", "swapcase":
		return m(func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 0, 0); err != nil {
				return nil, err
			}
			// case mapping grows UTF-8 by at most half; runes take 4 bytes
			if err := r.growN(int64(len(s)), 5, "%s() of a string of %d bytes", name, len(s)); err != nil {
				return nil, err
			}
			switch name {
			case "upper":
				return strings.ToUpper(s), nil
			case "lower":
				return strings.ToLower(s), nil
			case "title":
				return pyTitle(s), nil
			case "capitalize":
				return pyCapitalize(s), nil
			}
			rs := []rune(s)
			for i, r := range rs {
				if unicode.IsUpper(r) {
					rs[i] = unicode.ToLower(r)
				} else {
					rs[i] = unicode.ToUpper(r)
				}
			}
			return string(rs), nil
		})
	case "find", "rfind", "index", "rindex", "count":
		return m(func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 1); err != nil {
				return nil, err
			}
			sub, err := strArg(name, args[0])
			if err != nil {
				return nil, err
			}
			var i int
			switch name {
			case "count":
				if sub == "" {
					return int64(utf8.RuneCountInString(s) + 1), nil
				}
				return int64(strings.Count(s, sub)), nil
			case "find", "index":
				i = strings.Index(s, sub)
			default:
				i = strings.LastIndex(s, sub)
			}
			if i < 0 {
				if name == "index" || name == "rindex" {
					return nil, fmt.Errorf("substring not found")
				}
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(s[:i])), nil
		})
	case "join":
		return m(func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 1); err != nil {
				return nil, err
			}
			items, err := r.iter(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				if parts[i], err = strArg("join", it); err != nil {
					return nil, err
				}
			}
			return r.join(parts, s)
		})
	case "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "isupper", "islower":
		return m(func(args []any, _ map[string]any) (any, error) {
			switch name {
			case "isdigit", "isnumeric", "isdecimal":
				return allRunes(s, unicode.IsDigit), nil
			case "isalpha":
				return allRunes(s, unicode.IsLetter), nil
			case "isalnum":
				return allRunes(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }), nil
			case "isspace":
				return allRunes(s, unicode.IsSpace), nil
			case "isupper":
				return strings.ToUpper(s) == s && strings.ToLower(s) != s, nil
			}
			return strings.ToLower(s) == s && strings.ToUpper(s) != s, nil
		})
	case "removeprefix", "removesuffix":
		return m(func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 1); err != nil {
				return nil, err
			}
			a, err := strArg(name, args[0])
			if err != nil {
				return nil, err
			}
			if name == "removeprefix" {
				return strings.TrimPrefix(s, a), nil
			}
			return strings.TrimSuffix(s, a), nil
		})
	case "partition", "rpartition":
		return m(func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 1); err != nil {
				return nil, err
			}
			sep, err := strArg(name, args[0])
			if err != nil {
				return nil, err
			}
			var i int
			if name == "partition" {
				i = strings.Index(s, sep)
				if i < 0 {
					return Tuple{s, "", ""}, nil
				}
			} else {
				i = strings.LastIndex(s, sep)
				if i < 0 {
					return Tuple{"", "", s}, nil
				}
			}
			return Tuple{s[:i], sep, s[i+len(sep):]}, nil
		})
	}
	return nil
}

func (r *renderer) dictMethod(d *Dict, name string) Func {
	switch name {
	case "items":
		return func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 0, 0); err != nil {
				return nil, err
			}
			return r.items(d)
		}
	case "keys":
		return func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 0, 0); err != nil {
				return nil, err
			}
			if err := r.growN(int64(d.Len()), elemSize, "keys() of %d keys", d.Len()); err != nil {
				return nil, err
			}
			return append([]any{}, d.keys...), nil
		}
	case "values":
		return func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 0, 0); err != nil {
				return nil, err
			}
			if err := r.growN(int64(d.Len()), elemSize, "values() of %d keys", d.Len()); err != nil {
				return nil, err
			}
			out := make([]any, len(d.keys))
			for i, k := range d.keys {
				out[i] = d.m[k]
			}
			return out, nil
		}
	case "get":
		return func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 2); err != nil {
				return nil, err
			}
			if v, ok := d.get(args[0]); ok {
				return v, nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		}
	}
	return nil
}

func (r *renderer) listMethod(l []any, name string) Func {
	switch name {
	case "index":
		return func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 1); err != nil {
				return nil, err
			}
			for i, e := range l {
				if r.equal(e, args[0]) {
					return int64(i), nil
				}
			}
			return nil, fmt.Errorf("%s is not in list", repr(args[0]))
		}
	case "count":
		return func(args []any, _ map[string]any) (any, error) {
			if err := wantArgs(name, args, 1, 1); err != nil {
				return nil, err
			}
			n := int64(0)
			for _, e := range l {
				if r.equal(e, args[0]) {
					n++
				}
			}
			return n, nil
		}
	}
	return nil
}

// fieldCount is len(s.split()) without building the fields.
func fieldCount(s string) int {
	n, in := 0, false
	for _, c := range s {
		sp := unicode.IsSpace(c)
		if !sp && !in {
			n++
		}
		in = !sp
	}
	return n
}

// replace is str.replace with the result's size charged first
// (old == "" inserts new around every character, as Python does).
func (r *renderer) replace(s, old, new string, count int64) (string, error) {
	n := int64(strings.Count(s, old))
	if count >= 0 && count < n {
		n = count
	}
	if n > 0 && int64(len(new)) > 0 && n > math.MaxInt64/int64(len(new)) {
		return "", r.grow(-1, "replace() of %d occurrences by %d bytes", n, len(new))
	}
	size := int64(len(s)) + n*(int64(len(new))-int64(len(old)))
	if err := r.grow(size, "replace() of %d occurrences by %d bytes", n, len(new)); err != nil {
		return "", err
	}
	return strings.Replace(s, old, new, int(n)), nil
}

// join is strings.Join with the result's size charged first.
func (r *renderer) join(parts []string, sep string) (string, error) {
	size := int64(0)
	if len(parts) > 1 {
		size = int64(len(parts)-1) * int64(len(sep)) // <= 2^20 items * budgeted sep: no overflow
	}
	for _, p := range parts {
		size += int64(len(p))
	}
	if err := r.grow(size, "join of %d items", len(parts)); err != nil {
		return "", err
	}
	return strings.Join(parts, sep), nil
}

// items is dict.items() charged first.
func (r *renderer) items(d *Dict) ([]any, error) {
	if err := r.growN(int64(d.Len()), 3*elemSize+24, "items() of %d keys", d.Len()); err != nil {
		return nil, err
	}
	out := make([]any, len(d.keys))
	for i, k := range d.keys {
		out[i] = Tuple{k, d.m[k]}
	}
	return out, nil
}
