package cli

import (
	"runtime/debug"
	"testing"
)

// TestVersionNamesCommitAndDate: ldflags values win; without them the Go
// build stamp supplies the module version, revision, time and dirtiness.
func TestVersionNamesCommitAndDate(t *testing.T) {
	stamp := &debug.BuildInfo{
		Main: debug.Module{Version: "v1.2.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	devel := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	cases := []struct {
		name, ver, rev, when string
		info                 *debug.BuildInfo
		want                 string
	}{
		{"ldflags", "v1.3.0", "abc1234", "2026-12-01T00:00:00Z", stamp, "ftchat v1.3.0 (commit abc1234, built 2026-12-01T00:00:00Z)"},
		{"build stamp", "dev", "", "", stamp, "ftchat v1.2.0 (commit 0123456789ab+dirty, built 2026-11-30T10:00:00Z)"},
		{"go run", "dev", "", "", devel, "ftchat dev (commit unknown, built unknown)"},
		{"no build info", "dev", "", "", nil, "ftchat dev (commit unknown, built unknown)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionString(tc.ver, tc.rev, tc.when, tc.info); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
