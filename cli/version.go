package cli

import (
	"fmt"
	"runtime/debug"
)

// Set at build time by the release build (.goreleaser.yaml) and `make
// build`: -X github.com/ftchat/ftchat/cli.version=... (and commit, date).
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// Version is the one-line answer of `ftchat version` and --version:
// version, commit and build date. Values not set by -ldflags come from the
// Go toolchain's build stamp (module version, vcs.revision, vcs.time), so
// a plain `go build` or `go install` also names its commit.
func Version() string {
	info, _ := debug.ReadBuildInfo()
	return versionString(version, commit, date, info)
}

func versionString(ver, rev, when string, info *debug.BuildInfo) string {
	// The stamp's vcs.modified describes its own revision only.
	dirty, stamped := false, false
	if info != nil {
		if ver == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			ver = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if rev == "" {
					rev, stamped = s.Value, true
				}
			case "vcs.time":
				if when == "" {
					when = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		rev = "unknown"
	} else if dirty && stamped {
		rev += "+dirty"
	}
	if when == "" {
		when = "unknown"
	}
	return fmt.Sprintf("ftchat %s (commit %s, built %s)", ver, rev, when)
}
