package jinja

import (
	"fmt"
	"math"
)

// fBatch is jinja2's batch(linecount, fill_with=None): the items in lists
// of linecount, the last one padded with fill_with when given. jinja2
// yields them lazily; here they are one list, charged before it is built.
func fBatch(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	n, f, isFloat, ok := asNumber(param(args, kw, 0, "linecount", Undefined{}))
	if !ok {
		return nil, fmt.Errorf("linecount must be a number")
	}
	if isFloat { // jinja2 compares len(batch) == linecount: 2.0 is 2, 2.5 never matches
		n = -1
		if f == math.Trunc(f) && math.Abs(f) < 1<<62 {
			n = int64(f)
		}
	}
	fill, hasFill := param(args, kw, 1, "fill_with", nil), true
	if fill == nil {
		hasFill = false
	}
	var out [][]any
	var cur []any
	count := int64(len(items))
	if n >= 0 && n < count {
		count++ // a batch of 0 first, as jinja2 yields for batch(0)
	}
	if hasFill && n > 0 {
		count += n // the padding, at most
	}
	nb := int64(len(items))/max(n, 1) + 2
	if err := r.growN(count+nb*3, elemSize, "batch(%d) of %d items", n, len(items)); err != nil {
		return nil, err
	}
	for _, it := range items {
		if int64(len(cur)) == n {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, it)
	}
	if len(cur) > 0 {
		for hasFill && int64(len(cur)) < n {
			cur = append(cur, fill)
		}
		out = append(out, cur)
	}
	res := make([]any, len(out))
	for i, b := range out {
		if b == nil {
			b = []any{}
		}
		res[i] = b
	}
	return res, nil
}

// joiner(sep=", ") is jinja2's: a function returning "" on its first call
// and sep on later ones, to join items printed in a loop.
func joiner(args []any, kw map[string]any) (any, error) {
	sep := param(args, kw, 0, "sep", ", ")
	if len(args) > 1 {
		return nil, fmt.Errorf("joiner() takes one separator, got %d arguments", len(args))
	}
	used := false
	return Func(func(args []any, _ map[string]any) (any, error) {
		if len(args) > 0 {
			return nil, fmt.Errorf("a joiner takes no arguments")
		}
		if !used {
			used = true
			return "", nil
		}
		return sep, nil
	}), nil
}

// cycler is jinja2's cycler(*items): next() gives the current item and
// moves on (wrapping around), current is the item next() gives next,
// reset() goes back to the first.
type cycler struct {
	items []any
	pos   int
}

func newCycler(args []any, kw map[string]any) (any, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("cycler() needs at least one item")
	}
	if len(kw) > 0 {
		return nil, fmt.Errorf("cycler() takes no keyword arguments")
	}
	return &cycler{items: args}, nil
}

func (c *cycler) attr(name string) (any, bool) {
	switch name {
	case "current":
		return c.items[c.pos], true
	case "next", "__next__":
		return Func(func(args []any, _ map[string]any) (any, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("cycler.next() takes no arguments")
			}
			v := c.items[c.pos]
			c.pos = (c.pos + 1) % len(c.items)
			return v, nil
		}), true
	case "reset":
		return Func(func(args []any, _ map[string]any) (any, error) {
			if len(args) > 0 {
				return nil, fmt.Errorf("cycler.reset() takes no arguments")
			}
			c.pos = 0
			return nil, nil
		}), true
	case "items":
		return c.items, true
	}
	return nil, false
}
