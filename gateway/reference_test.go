package gateway_test

import (
	"encoding"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
)

// The config reference is checked here against the code: the fields of
// config.Config, found by walking the struct by its yaml tags, must each
// appear, commented, in configs/gateway.example.yaml and have a row in the
// configuration table of docs/configuration.md, whose defaults and restart
// marks must be the code's. A field added without its documentation fails
// these tests.

const (
	examplePath = "../configs/gateway.example.yaml"
	// contractPath is a byte-for-byte copy of the product's contract
	// (sharedContract), kept here so that the check runs on any clone.
	contractPath = "testdata/contract.yaml"
	// sharedContract is the product's contract beside the repository, on
	// the machines that have it.
	sharedContract = "../../shared/gateway.example.yaml"
	// docsDir holds the pages whose tables are checked against the code.
	docsDir = "../docs"
)

var cmpConfig = cmp.Options{cmpopts.IgnoreUnexported(config.Config{}), cmpopts.EquateEmpty()}

var (
	yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// configFields returns the path of every field of config.Config that a
// file sets, as the file writes it: "server.listen",
// "upstream.health_check.path", "rules[].allow". Structs are walked into;
// a list of structs adds "[]"; a type that decodes itself from YAML or
// text (limit.Limit, rollup.Tier) is a field, not a struct.
func configFields() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name) // the yaml library's default
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			ft := f.Type
			switch {
			case slices.Contains(strings.Split(flags, ","), "inline"):
				walk(ft, prefix)
			case decodesItself(ft):
				out = append(out, path)
			case ft.Kind() == reflect.Struct:
				walk(ft, path)
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && !decodesItself(ft.Elem()):
				walk(ft.Elem(), path+"[]")
			default:
				out = append(out, path)
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	return out
}

func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(yamlUnmarshaler) || p.Implements(textUnmarshaler)
}

// commentedField is a field the example shows as a commented-out line:
// "  # read_timeout: 60s   # what it does", or an item of a list:
// "  # - hosts: [sho.rt]   # what it does".
var commentedField = regexp.MustCompile(`^(\s*)# ((?:- )?[a-z_][a-z0-9_]*:(?:\s.*)?)$`)

// uncomment returns src with its commented-out fields made real. A
// commented-out list item ("  # - hosts: ...") and the commented-out lines
// indented under it are an example entry of a list that is empty by
// default (routes), not a default: they stay comments unless entries is
// set, for the check that every field is documented.
func uncomment(src string, entries bool) string {
	lines := strings.Split(src, "\n")
	entry := -1 // the indentation of the "#" of the example entry being read; -1: none
	for i, l := range lines {
		m := commentedField.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		switch indent := len(m[1]); {
		case entry >= 0 && indent > entry:
		case strings.HasPrefix(m[2], "- "):
			entry = indent
		default:
			entry = -1
		}
		if entry < 0 || entries {
			lines[i] = m[1] + m[2]
		}
	}
	return strings.Join(lines, "\n")
}

// TestExampleIsTheContract: the product's contract loads and compiles as it
// stands, and configs/gateway.example.yaml is the contract plus comments:
// it compiles to the same config, and so does it with its commented-out
// fields uncommented (they are shown at their defaults).
func TestExampleIsTheContract(t *testing.T) {
	contract, err := os.ReadFile(contractPath)
	if err != nil {
		t.Fatal(err)
	}
	if shared, err := os.ReadFile(sharedContract); err != nil {
		t.Logf("the product's contract is not beside the repository (%v): checking the copy in %s", err, contractPath)
	} else if string(shared) != string(contract) {
		t.Fatalf("%s differs from the product's contract %s: copy it again, then bring configs/gateway.example.yaml up to it", contractPath, sharedContract)
	}
	want, err := gateway.Load(contractPath, getenv)
	if err != nil {
		t.Fatalf("the contract does not load as it stands: %v", err)
	}
	if len(want.Config().Rules) == 0 || len(want.Config().Upstream.Targets) == 0 {
		t.Fatalf("the contract loaded without its rules or targets: %+v", want.Config())
	}

	example, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	uncommented := filepath.Join(t.TempDir(), "uncommented.yaml")
	if err := os.WriteFile(uncommented, []byte(uncomment(string(example), false)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{examplePath, uncommented} {
		got, err := gateway.Load(path, getenv)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if d := cmp.Diff(want.Config(), got.Config(), cmpConfig); d != "" {
			t.Errorf("%s does not compile to the contract's config (-contract +example):\n%s", path, d)
		}
	}
}

// TestExampleDocumentsEveryField: every field of config.Config is in
// configs/gateway.example.yaml, as a setting or a commented-out line, with
// a comment on its line or on the line above.
func TestExampleDocumentsEveryField(t *testing.T) {
	src, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	text := uncomment(string(src), true)
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("%s with its commented-out fields uncommented: %v", examplePath, err)
	}
	keys := map[string][]int{} // field path → lines of its keys
	collectKeys(&doc, "", keys)
	lines := strings.Split(text, "\n")
	fields := configFields()
	if len(fields) < 40 {
		t.Fatalf("found only %d fields in config.Config: %v", len(fields), fields)
	}
	var missing, bare []string
	for _, f := range fields {
		at, ok := keys[f]
		if !ok {
			missing = append(missing, f)
			continue
		}
		if !slices.ContainsFunc(at, func(l int) bool { return commented(lines, l) }) {
			bare = append(bare, fmt.Sprintf("%s (line %d)", f, at[0]))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s leaves out %s: show each, at its default, as a line like \"  # field: value   # what it does\"", examplePath, strings.Join(missing, ", "))
	}
	if len(bare) > 0 {
		t.Errorf("%s: no comment says what these fields do: %s", examplePath, strings.Join(bare, ", "))
	}
}

// collectKeys records the line of every mapping key under n by its field
// path, list items written "[]".
func collectKeys(n *yaml.Node, path string, keys map[string][]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectKeys(c, path, keys)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			keys[p] = append(keys[p], n.Content[i].Line)
			collectKeys(n.Content[i+1], p, keys)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			collectKeys(c, path+"[]", keys)
		}
	}
}

// commented reports whether line l (1-based) carries a comment after its
// content, or follows a line that is only a comment.
func commented(lines []string, l int) bool {
	if hasComment(lines[l-1]) {
		return true
	}
	return l >= 2 && strings.HasPrefix(strings.TrimSpace(lines[l-2]), "#")
}

// hasComment reports whether a YAML line has a comment outside quotes.
func hasComment(line string) bool {
	var quote rune
	prev := ' '
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return true
		}
		prev = r
	}
	return false
}

// docTable returns the rows of the table of docs/<page> whose header row
// is header, each row as its cells.
func docTable(t *testing.T, page, header string) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(docsDir, page))
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case l == header:
			in = true
		case !in:
		case !strings.HasPrefix(l, "|"):
			if rows != nil {
				return rows
			}
		case strings.HasPrefix(l, "|---"):
		default:
			rows = append(rows, cells(l))
		}
	}
	if rows == nil {
		t.Fatalf("docs/%s: no table with the header %q", page, header)
	}
	return rows
}

// cells splits a table row at the pipes outside code spans.
func cells(row string) []string {
	var out []string
	var b strings.Builder
	code := false
	for _, r := range strings.Trim(row, "|") {
		switch {
		case r == '`':
			code = !code
		case r == '|' && !code:
			out = append(out, strings.TrimSpace(b.String()))
			b.Reset()
			continue
		}
		b.WriteRune(r)
	}
	return append(out, strings.TrimSpace(b.String()))
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// spans returns the contents of the code spans of s.
func spans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// configRow is a row of the configuration table.
type configRow struct {
	field    string
	def      string // the default cell
	restart  bool   // marked ¹, ² or ³: changes only on restart
	required bool
}

// configTableHeader is the header row of the configuration table of
// docs/configuration.md.
const configTableHeader = "| field | default | meaning |"

// docConfigTable reads the configuration table: one row per field, the
// field's full path in the first cell.
func docConfigTable(t *testing.T) map[string]configRow {
	t.Helper()
	rows := docTable(t, "configuration.md", configTableHeader)
	out := map[string]configRow{}
	for _, c := range rows {
		if len(c) != 3 {
			t.Errorf("docs/configuration.md: row %q has %d cells, want 3", c, len(c))
			continue
		}
		names := spans(c[0])
		if len(names) != 1 || "`"+names[0]+"`" != c[0] {
			t.Errorf("docs/configuration.md: the first cell %q must be one field's full path in backquotes, like `server.listen`", c[0])
			continue
		}
		f := names[0]
		if _, dup := out[f]; dup {
			t.Errorf("docs/configuration.md: %s has two rows", f)
		}
		row := strings.Join(c, " ")
		out[f] = configRow{
			field: f, def: c[1], restart: strings.ContainsAny(row, "¹²³"),
			required: strings.HasPrefix(c[1], "required"),
		}
	}
	return out
}

// TestConfigTable: the configuration table of docs/configuration.md has a row for
// every field of config.Config and no other; each default it gives is the
// code's (or the field is required: leaving it out fails the compile,
// naming it); and the fields it marks as changing only on restart are the
// ones a reload keeps (restartOnly).
func TestConfigTable(t *testing.T) {
	rows := docConfigTable(t)
	fields := configFields()
	var missing, extra []string
	for _, f := range fields {
		if _, ok := rows[f]; !ok {
			missing = append(missing, f)
		}
	}
	for f := range rows {
		if !slices.Contains(fields, f) {
			extra = append(extra, f)
		}
	}
	slices.Sort(extra)
	if len(missing) > 0 {
		t.Errorf("docs/configuration.md: no row for %s", strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		t.Errorf("docs/configuration.md: rows for fields config.Config does not have: %s", strings.Join(extra, ", "))
	}

	for _, f := range fields {
		row, ok := rows[f]
		if !ok {
			continue
		}
		t.Run(f, func(t *testing.T) {
			if row.required {
				checkRequired(t, f)
			} else {
				checkDefault(t, f, row.def, parseDoc(t, docFor(f)))
			}
			checkRestart(t, f, row.restart)
		})
	}
}

// baseDoc is the smallest file that compiles, with one rule: the fields'
// defaults are checked against it.
func baseDoc() map[string]any {
	return map[string]any{
		"upstream": map[string]any{"targets": []any{"http://127.0.0.1:1"}},
		"rules": []any{map[string]any{
			"name": "r", "match": map[string]any{"path": "/x"}, "key": "ip", "limits": []any{"1/s"},
		}},
	}
}

// docFor is baseDoc with a route when f is a field of routes[] (a tenant
// for tenants[]), so that the first one's field can be set and changed.
func docFor(f string) map[string]any {
	doc := baseDoc()
	if strings.HasPrefix(f, "rules[].penalty.") && f != "rules[].penalty.duration" || f == "rules[].edge" {
		// A penalty's other fields, and edge, need its duration.
		doc["rules"].([]any)[0].(map[string]any)["penalty"] = map[string]any{"duration": "1s"}
	}
	if strings.HasPrefix(f, "tenants[]") {
		doc["tenants"] = []any{map[string]any{"name": "acme", "hosts": []any{"go.acme.example"}}}
	}
	if strings.HasPrefix(f, "routes[]") {
		doc["routes"] = []any{map[string]any{
			"hosts": []any{"r.example"}, "upstream": map[string]any{"targets": []any{"http://127.0.0.1:2"}},
		}}
	}
	return doc
}

func parseDoc(t *testing.T, doc map[string]any) *config.Config {
	t.Helper()
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return c
}

// parent returns the map holding field f in doc (the first rule's, for
// rules[] fields), creating the maps on the way, and f's last name.
func parent(doc map[string]any, f string) (map[string]any, string) {
	parts := strings.Split(f, ".")
	m := doc
	for _, p := range parts[:len(parts)-1] {
		if name, ok := strings.CutSuffix(p, "[]"); ok {
			m = m[name].([]any)[0].(map[string]any)
			continue
		}
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	return m, parts[len(parts)-1]
}

// checkDefault: the file that sets f to the value the table gives as its
// default reads as the file that leaves f out.
func checkDefault(t *testing.T, f, cell string, baseline *config.Config) {
	vals := spans(cell)
	if len(vals) == 0 || !strings.HasPrefix(cell, "`") {
		t.Fatalf("docs/configuration.md: the default of %s, %q, must start with the value in backquotes (or say required)", f, cell)
	}
	var v any
	if err := yaml.Unmarshal([]byte(vals[0]), &v); err != nil {
		t.Fatalf("docs/configuration.md: the default of %s, %q, is not YAML: %v", f, vals[0], err)
	}
	doc := docFor(f)
	m, name := parent(doc, f)
	m[name] = v
	if d := cmp.Diff(baseline, parseDoc(t, doc), cmpConfig); d != "" {
		t.Errorf("docs/configuration.md: the default of %s is not %s (-code +docs):\n%s", f, vals[0], d)
	}
}

// checkRequired: a file without f fails the compile, naming f (or the
// struct holding it).
func checkRequired(t *testing.T, f string) {
	doc := docFor(f)
	m, name := parent(doc, f)
	delete(m, name)
	_, err := gateway.Compile(parseDoc(t, doc), getenv)
	path := strings.ReplaceAll(f, "[]", "[0]")
	if err == nil {
		t.Fatalf("docs/configuration.md says %s is required, but a file without it compiles", f)
	}
	if holder := path[:max(strings.LastIndex(path, "."), 0)]; !strings.Contains(err.Error(), path+":") && (holder == "" || !strings.Contains(err.Error(), holder+":")) {
		t.Errorf("without %s: %v; want an error naming it", f, err)
	}
}

// checkRestart: a reload that changes f keeps its running value exactly
// when the table marks f so.
func checkRestart(t *testing.T, f string, marked bool) {
	run, next := parseDoc(t, docFor(f)), parseDoc(t, docFor(f))
	change(t, field(t, reflect.ValueOf(next).Elem(), f), f)
	kept := slices.ContainsFunc(gateway.RestartOnly(run, next), func(n string) bool {
		return n == f || strings.HasPrefix(f, n+".")
	})
	switch {
	case kept && !marked:
		t.Errorf("docs/configuration.md: %s changes only on restart (a reload keeps its running value): mark it ¹ (listeners), ² (analytics pipeline) or ³ (trace exporter)", f)
	case marked && !kept:
		t.Errorf("docs/configuration.md marks %s as changing only on restart, but a reload applies it", f)
	}
}

// field returns the field at path f in v (a config.Config), the first
// element for "[]".
func field(t *testing.T, v reflect.Value, f string) reflect.Value {
	t.Helper()
	for _, p := range strings.Split(f, ".") {
		name, list := strings.CutSuffix(p, "[]")
		got, found := yamlField(v, name)
		if !found {
			t.Fatalf("no field %s in %s", name, v.Type())
		}
		v = got
		if list {
			v = v.Index(0)
		}
	}
	return v
}

// yamlField returns the field of struct v that a file names name, looking
// into the structs v inlines.
func yamlField(v reflect.Value, name string) (reflect.Value, bool) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		tag, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if slices.Contains(strings.Split(flags, ","), "inline") {
			if got, ok := yamlField(v.Field(i), name); ok {
				return got, true
			}
			continue
		}
		if tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// change gives v a different value of its type.
func change(t *testing.T, v reflect.Value, f string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Pointer:
		n := reflect.New(v.Type().Elem()) // set, where it was unset
		if !v.IsNil() {
			n.Elem().Set(v.Elem())
			change(t, n.Elem(), f)
		}
		v.Set(n)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, k := range v.MapKeys() {
			m.SetMapIndex(k, v.MapIndex(k))
		}
		k := reflect.New(v.Type().Key()).Elem()
		change(t, k, f)
		m.SetMapIndex(k, reflect.Zero(v.Type().Elem()))
		v.Set(m)
	default:
		t.Fatalf("%s: cannot change a %s to check whether a reload applies it: teach change", f, v.Type())
	}
}
