package main

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Issue 15 item 17: short aliases -c (--continue), -n (--max-tokens),
// -t (--temperature) and -f (--file, repeatable), none clashing with
// another flag.
func TestShortFlagAliases(t *testing.T) {
	root := newRoot(viper.New())
	if err := root.ParseFlags([]string{"-c", "-n", "5", "-t", "0.3", "-f", "a.go", "-f", "b c.go"}); err != nil {
		t.Fatal(err)
	}
	f := root.Flags()
	for name, want := range map[string]string{"continue": "true", "max-tokens": "5", "temperature": "0.3", "file": "[a.go,b c.go]"} {
		if got := f.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	seen := map[string]string{}
	visit := func(name, short string) {
		if short == "" {
			return
		}
		if other, ok := seen[short]; ok && other != name {
			t.Errorf("-%s is both --%s and --%s", short, other, name)
		}
		seen[short] = name
	}
	for _, c := range append(root.Commands(), root) {
		c.Flags().VisitAll(func(fl *pflag.Flag) { visit(fl.Name, fl.Shorthand) })
		c.InheritedFlags().VisitAll(func(fl *pflag.Flag) { visit(fl.Name, fl.Shorthand) })
	}
}
