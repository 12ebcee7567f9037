package visitclass_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// sample is one block of testdata/corpus.txt.
type sample struct {
	class  visitclass.Class
	name   string
	method string
	header http.Header
	ja4    string
	net    string // "AS123 ORG", "internal" or ""
	link   string
	at     int
}

// readCorpus parses testdata/corpus.txt.
func readCorpus(t testing.TB) []sample {
	t.Helper()
	f, err := os.Open("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sets := map[string]http.Header{}
	var out []sample
	var cur *sample
	var set http.Header
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "== "); ok {
			kind, name, _ := strings.Cut(rest, " ")
			cur, set = nil, nil
			if kind == "set" {
				set = http.Header{}
				sets[name] = set
				continue
			}
			c, ok := visitclass.ParseClass(kind)
			if !ok {
				t.Fatalf("corpus.txt:%d: class %q", n, kind)
			}
			out = append(out, sample{class: c, name: name, method: "GET", header: http.Header{}, link: name})
			cur = &out[len(out)-1]
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("corpus.txt:%d: %q", n, line)
		}
		if set != nil {
			set.Set(k, v)
			continue
		}
		if cur == nil {
			t.Fatalf("corpus.txt:%d: outside a block", n)
		}
		switch k {
		case "use":
			s, ok := sets[v]
			if !ok {
				t.Fatalf("corpus.txt:%d: no set %q", n, v)
			}
			for hk, hv := range s {
				cur.header[hk] = slices.Clone(hv)
			}
		case "method":
			cur.method = v
		case "ja4":
			cur.ja4 = v
		case "net":
			cur.net = v
		case "link":
			cur.link = v
		case "at":
			if cur.at, err = strconv.Atoi(v); err != nil {
				t.Fatalf("corpus.txt:%d: %v", n, err)
			}
		case "source":
		default:
			cur.header.Set(k, v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(out, func(a, b sample) int { return a.at - b.at })
	return out
}

// corpusClassifier returns a classifier with a test ASN database holding
// each network the corpus names, in 198.18.0.0/15 (RFC 2544's benchmarking
// range), the default lists, and 192.0.2.0/24 as the internal network;
// and the address of each network.
func corpusClassifier(t testing.TB, corpus []sample) (*visitclass.Classifier, map[string]netip.Addr) {
	nets := map[string]visitortest.AS{}
	addrs := map[string]netip.Addr{"": netip.MustParseAddr("203.0.113.7"), "internal": netip.MustParseAddr("192.0.2.10")}
	for _, s := range corpus {
		if _, ok := addrs[s.net]; ok {
			continue
		}
		num, org, _ := strings.Cut(s.net, " ")
		n, err := strconv.ParseUint(strings.TrimPrefix(num, "AS"), 10, 32)
		if err != nil {
			t.Fatalf("%s: net %q", s.name, s.net)
		}
		i := len(addrs)
		nets[fmt.Sprintf("198.18.%d.0/24", i)] = visitortest.AS{Number: uint32(n), Org: org}
		addrs[s.net] = netip.MustParseAddr(fmt.Sprintf("198.18.%d.9", i))
	}
	db, err := visitclass.OpenNetworks(visitortest.ASNDB(t, nets), visitclass.DefaultScannerNetworks, visitclass.DefaultCloudNetworks)
	if err != nil {
		t.Fatal(err)
	}
	return visitclass.New(visitclass.Options{Networks: db, Internal: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}), addrs
}

// TestCorpus replays the labelled corpus and prints the classifier's
// precision and recall per class, and how many people it took for
// machines. It fails below the floors: they are what docs/analytics.md
// states, less nothing.
func TestCorpus(t *testing.T) {
	corpus := readCorpus(t)
	c, addrs := corpusClassifier(t, corpus)
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	var confusion [visitclass.NumClasses][visitclass.NumClasses]int // [truth][got]
	for _, s := range corpus {
		r := &http.Request{Method: s.method, Header: s.header}
		got, reason := c.Classify(r, visitclass.Visit{Client: addrs[s.net], JA4: s.ja4, Key: s.link, Time: start.Add(time.Duration(s.at) * time.Second)})
		confusion[s.class][got]++
		mark := " "
		if got != s.class {
			mark = "✗"
		}
		t.Logf("%s %-9s %-32s → %-9s (%s)", mark, s.class, s.name, got, reason)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d visits\n%-9s %5s %9s %6s\n", len(corpus), "class", "n", "precision", "recall")
	total, right := 0, 0
	for k := range visitclass.NumClasses {
		n, tp, predicted := 0, confusion[k][k], 0
		for j := range visitclass.NumClasses {
			n += confusion[k][j]
			predicted += confusion[j][k]
		}
		total += n
		right += tp
		fmt.Fprintf(&sb, "%-9s %5d %9s %6s\n", k, n, ratio(tp, predicted), ratio(tp, n))
		if n > 0 && float64(tp)/float64(n) < 0.85 {
			t.Errorf("recall of %s is %d/%d, under the floor of 85%%", k, tp, n)
		}
		if predicted > 0 && float64(tp)/float64(predicted) < 0.85 {
			t.Errorf("precision of %s is %d/%d, under the floor of 85%%", k, tp, predicted)
		}
	}
	humans := 0
	for j := range visitclass.NumClasses {
		humans += confusion[visitclass.Human][j]
	}
	lost := humans - confusion[visitclass.Human][visitclass.Human]
	fmt.Fprintf(&sb, "accuracy %s; people taken for machines: %d of %d (%s)\n", ratio(right, total), lost, humans, ratio(lost, humans))
	fmt.Print(sb.String())
	if float64(lost)/float64(humans) > 0.05 {
		t.Errorf("%d of %d people taken for machines: over the 5%% ceiling", lost, humans)
	}
}

func ratio(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

// BenchmarkClassify is the cost of classifying a visit: a person's Chrome
// visit with every signal on (the common path: every list consulted, the
// network looked up, nothing matched).
func BenchmarkClassify(b *testing.B) {
	c, r, visit := benchSample(b, "chrome-windows")
	benchClassify(b, c, r, visit(time.Now()))
}

// BenchmarkClassifyCloud is a visit from a cloud network after the burst
// window: the burst table is read too.
func BenchmarkClassifyCloud(b *testing.B) {
	c, r, visit := benchSample(b, "windows-365-cloud-pc")
	t0 := time.Now()
	c.Classify(r, visit(t0))
	benchClassify(b, c, r, visit(t0.Add(time.Hour)))
}

// benchSample is the corpus's classifier, and the request of the sample
// name with its visit at a time.
func benchSample(b *testing.B, name string) (*visitclass.Classifier, *http.Request, func(time.Time) visitclass.Visit) {
	corpus := readCorpus(b)
	c, addrs := corpusClassifier(b, corpus)
	s := corpus[slices.IndexFunc(corpus, func(s sample) bool { return s.name == name })]
	return c, &http.Request{Method: s.method, Header: s.header}, func(at time.Time) visitclass.Visit {
		return visitclass.Visit{Client: addrs[s.net], JA4: s.ja4, Key: s.link, Time: at}
	}
}

// benchClassify measures classifying v, a human's visit.
func benchClassify(b *testing.B, c *visitclass.Classifier, r *http.Request, v visitclass.Visit) {
	b.ReportAllocs()
	for b.Loop() {
		if got, _ := c.Classify(r, v); got != visitclass.Human {
			b.Fatal(got)
		}
	}
}
