// Package docs_test checks the pages of docs/ and README.md against the
// repository: every relative link and anchor resolves, every test,
// benchmark and fuzzer they cite exists, the layout names every package,
// and the README stays one page. The tables that hold the code's own
// figures (configuration, metrics, alerts) are checked by the tests of
// gateway and configs (see tests.md).
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from docs/ where the test runs.
const root = ".."

// readmeMaxLines is the length of a README that reads as one page.
const readmeMaxLines = 250

// pages returns README.md and every page of docs/, by path from root.
func pages(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 5 {
		t.Fatalf("docs/ has %d pages: %v", len(names), names)
	}
	out := map[string]string{}
	for _, n := range append(names, filepath.Join(root, "README.md")) {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, n)
		if err != nil {
			t.Fatal(err)
		}
		out[rel] = string(data)
	}
	return out
}

var (
	fence    = regexp.MustCompile("(?ms)^```.*?^```")
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// prose is a page without its code blocks and code spans, where a "](x)"
// is text, not a link.
func prose(page string) string {
	return codeSpan.ReplaceAllString(fence.ReplaceAllString(page, ""), "")
}

// anchors returns the anchors GitHub makes of a page's headings: lower
// case, punctuation dropped but for "-" and "_", spaces made "-".
func anchors(page string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(page, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestLinks: every relative link of every page names a file or folder of
// the repository, and every #anchor a heading of the page it points to.
func TestLinks(t *testing.T) {
	all := pages(t)
	n := 0
	for name, page := range all {
		for _, m := range link.FindAllStringSubmatch(prose(page), -1) {
			target := m[1]
			if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			path, anchor, _ := strings.Cut(target, "#")
			file := name
			if path != "" {
				file = filepath.Join(filepath.Dir(name), path)
				if _, err := os.Stat(filepath.Join(root, file)); err != nil {
					t.Errorf("%s: link to %s: %v", name, target, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			linked, ok := all[file]
			if !ok {
				t.Errorf("%s: link to %s: an anchor in a file that is not one of the pages", name, target)
				continue
			}
			if !slices.Contains(anchors(linked), anchor) {
				t.Errorf("%s: link to %s: %s has no heading #%s (it has %v)", name, target, file, anchor, anchors(linked))
			}
		}
	}
	if n < 50 {
		t.Errorf("found only %d relative links in the pages: is the link pattern still right?", n)
	}
}

var (
	cited   = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*`)
	defined = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*)\(`)
)

// TestCitedTestsExist: every TestX, BenchmarkX and FuzzX a page names is a
// function of a _test.go file of the repository, so that a claim backed
// by a test names one that runs.
func TestCitedTestsExist(t *testing.T) {
	funcs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDir(path, d.Name()) {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range defined.FindAllStringSubmatch(string(data), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, page := range pages(t) {
		for _, c := range cited.FindAllString(page, -1) {
			n++
			if !funcs[c] {
				t.Errorf("%s cites %s, which no _test.go file defines", name, c)
			}
		}
	}
	if n < 50 {
		t.Errorf("the pages cite only %d tests: is the pattern still right?", n)
	}
}

// skipDir reports whether a folder holds no package of the repository:
// version control, test data, and what the demo and the benchmarks leave
// in the working tree.
func skipDir(path, name string) bool {
	if path == root {
		return false
	}
	if strings.HasPrefix(name, ".") || name == "testdata" {
		return true
	}
	rel, _ := filepath.Rel(root, path)
	return rel == "bin" || rel == "data" || rel == filepath.Join("bench", "results")
}

// TestLayoutNamesEveryPackage: the layout of docs/layout.md has an entry
// ("path/  what it holds", at the start of a line of its code block) for
// every folder of the repository holding Go files, and names no folder
// that does not exist.
func TestLayoutNamesEveryPackage(t *testing.T) {
	data, err := os.ReadFile("layout.md")
	if err != nil {
		t.Fatal(err)
	}
	block := fence.FindString(string(data))
	entries := map[string]bool{}
	for _, l := range strings.Split(block, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(l, " ") && strings.HasSuffix(f[0], "/") {
			entries[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	packages := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDir(path, d.Name()) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			packages[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) < 20 {
		t.Fatalf("found only %d packages: %v", len(packages), packages)
	}
	for p := range packages {
		if !entries[p] {
			t.Errorf("docs/layout.md names no %s/: add a line saying what it holds", p)
		}
	}
	for e := range entries {
		if st, err := os.Stat(filepath.Join(root, e)); err != nil || !st.IsDir() {
			t.Errorf("docs/layout.md names %s/, which is not a folder of the repository", e)
		}
	}
}

// TestReadmeIsOnePage: README.md is the front door, and what does not fit
// on one page belongs in docs/.
func TestReadmeIsOnePage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page of docs/ and link it", n, readmeMaxLines)
	}
}
