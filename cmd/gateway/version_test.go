package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestVersionText: what "gateway version" prints from the build
// information Go records (module version, VCS revision, time, modified)
// and from the values set at build time where Go recorded none.
func TestVersionText(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/linkgate/linkgate", Version: "v1.2.0"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "a06c2f453f6b91160eac6ba663f9870d9c4d2074"},
			{Key: "vcs.time", Value: "2026-11-26T21:20:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	devel := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/linkgate/linkgate", Version: "(devel)"}}
	here := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name              string
		bi                *debug.BuildInfo
		version, revision string
		want, short       string
	}{
		{"stamped by go build", stamped, "dev", "",
			"linkgate v1.2.0\nmodule   github.com/linkgate/linkgate v1.2.0\nrevision a06c2f453f6b91160eac6ba663f9870d9c4d2074 (2026-11-26T21:20:00Z, modified)\ngo       go1.26.8 linux/arm64\n",
			"v1.2.0 (a06c2f453f6b, modified)"},
		{"a version set at build time wins, Go's revision stays", stamped, "v1.2.1-rc1", "ffff",
			"linkgate v1.2.1-rc1\nmodule   github.com/linkgate/linkgate v1.2.0\nrevision a06c2f453f6b91160eac6ba663f9870d9c4d2074 (2026-11-26T21:20:00Z, modified)\ngo       go1.26.8 linux/arm64\n",
			"v1.2.1-rc1 (a06c2f453f6b, modified)"},
		{"no VCS information, revision set at build time", devel, "dev", "0123456789abcdef0123",
			"linkgate (devel)\nmodule   github.com/linkgate/linkgate (devel)\nrevision 0123456789abcdef0123\ngo       go1.26.8 " + here + "\n",
			"(devel) (0123456789ab)"},
		{"nothing known", devel, "dev", "",
			"linkgate (devel)\nmodule   github.com/linkgate/linkgate (devel)\nrevision unknown (built without version control information: build in a git clone, or set -ldflags \"-X main.revision=...\")\ngo       go1.26.8 " + here + "\n",
			"(devel)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionText(tc.bi, tc.version, tc.revision); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if got := readVersion(tc.bi, tc.version, tc.revision).short(); got != tc.short {
				t.Errorf("short: got %q, want %q", got, tc.short)
			}
		})
	}
}
