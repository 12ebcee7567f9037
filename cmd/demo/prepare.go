package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// countries are the networks the seeded visits come from, by the share
// of visitors each gets: documentation ranges (RFC 5737, RFC 3849), which
// no real client has, given a country each in the demo's database. The
// last has none: its visitors count as country "unknown".
var countries = []struct {
	cidr, code string
	weight     int
}{
	{"198.51.100.0/25", "US", 30},
	{"203.0.113.0/26", "DE", 18},
	{"192.0.2.0/25", "GB", 12},
	{"203.0.113.64/26", "FR", 10},
	{"192.0.2.128/25", "IN", 8},
	{"203.0.113.128/26", "JP", 7},
	{"203.0.113.192/26", "BR", 6},
	{"198.51.100.128/25", "CA", 5},
	{"2001:db8::/33", "AU", 4},
	{"2001:db8:8000::/33", "", 3},
}

// prepare writes the demo's country database and config under -dir.
func prepare(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo prepare", flag.ContinueOnError)
	fs.SetOutput(stdout)
	base := fs.String("config", "configs/gateway.quickstart.yaml", "the config the demo's is made from")
	dir := fs.String("dir", "data", "the demo's folder: the store, the country database and the config")
	listen := fs.String("listen", "", "server.listen; empty: the config's")
	admin := fs.String("admin", "", "admin.listen; empty: the config's")
	upstream := fs.String("upstream", "", "the demo service's URL, upstream.targets; empty: the config's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("prepare: unexpected argument %q", fs.Arg(0))
	}
	out := filepath.Join(*dir, "demo")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	geo := filepath.Join(out, "countries.mmdb")
	known := map[string]string{}
	for _, c := range countries {
		if c.code != "" {
			known[c.cidr] = c.code
		}
	}
	if err := visitortest.WriteCountryDB(geo, visitortest.GeoLite2, "linkgate demo countries: documentation ranges only", known); err != nil {
		return fmt.Errorf("prepare: %s: %w", geo, err)
	}

	src, err := os.ReadFile(*base)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil || doc.Kind != yaml.DocumentNode {
		return fmt.Errorf("prepare: %s: not a YAML document: %v", *base, err)
	}
	doc.HeadComment = fmt.Sprintf("Written by demo.sh (demo prepare) from %s, with the demo's country\ndatabase and the store under %s. Edit it while the demo runs: the gateway\nreloads it; demo.sh writes it again at its next start.", *base, *dir)
	set := map[string]any{
		"analytics.geoip.path":    geo,
		"analytics.embedded.path": filepath.Join(*dir, "analytics"),
	}
	if *listen != "" {
		set["server.listen"] = *listen
	}
	if *admin != "" {
		set["admin.listen"] = *admin
	}
	if *upstream != "" {
		set["upstream.targets"] = []string{*upstream}
	}
	for path, v := range set {
		if err := setField(doc.Content[0], strings.Split(path, "."), v); err != nil {
			return fmt.Errorf("prepare: %s: %s: %w", *base, path, err)
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2) // as the quick start is written
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	data := buf.Bytes()
	if _, err := config.Parse(data); err != nil {
		return fmt.Errorf("prepare: the demo's config does not read: %w", err)
	}
	cfg := filepath.Join(out, "gateway.yaml")
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "demo: config %s: %s with countries from %s (made for the demo's addresses)\n", cfg, *base, geo)
	return nil
}

// setField sets the field at path in the mapping m to v, adding the
// mappings on the way that m lacks; the comments of a value it replaces
// stay.
func setField(m *yaml.Node, path []string, v any) error {
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("not a mapping at %s", path[0])
	}
	var val *yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == path[0] {
			val = m.Content[i+1]
		}
	}
	if val == nil {
		val = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: path[0]}, val)
	}
	if len(path) > 1 {
		return setField(val, path[1:], v)
	}
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return err
	}
	if n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle // [a, b], as the quick start writes lists
	}
	n.HeadComment, n.LineComment, n.FootComment = val.HeadComment, val.LineComment, val.FootComment
	*val = n
	return nil
}
