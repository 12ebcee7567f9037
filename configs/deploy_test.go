// Package configs_test checks the deployment files statically: no Docker
// engine runs where the tests run, so docker-compose.yml, the Dockerfile and
// every config here are parsed and cross-checked instead of started.
package configs_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
)

const root = ".." // tests run in configs/

// compose is the part of the Compose file format these files use. It has no
// top-level "name": Debian 12's docker-compose 1.29.2 rejects the file with
// one (see TestComposeLoadsInCompose1).
type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Build       any               `yaml:"build"`
	Image       string            `yaml:"image"`
	Entrypoint  []string          `yaml:"entrypoint"` // exec form only: the files use no shell form
	Command     []string          `yaml:"command"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Expose      []string          `yaml:"expose"`
	DependsOn   dependsOn         `yaml:"depends_on"`
	Environment map[string]string `yaml:"environment"`
	Healthcheck *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		Retries     int      `yaml:"retries"`
		StartPeriod string   `yaml:"start_period"`
	} `yaml:"healthcheck"`
	Restart  string             `yaml:"restart"`
	Networks map[string]network `yaml:"networks"`
}

// network is a service's attachment to a network; a fixed address is what a
// trusted proxy in the compose file would need.
type network struct {
	IPv4Address string `yaml:"ipv4_address"`
	IPv6Address string `yaml:"ipv6_address"`
}

// dependsOn reads both forms: a list of names or a map of name → condition.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			(*d)[s] = "service_started"
		}
		return nil
	}
	var m map[string]struct {
		Condition string `yaml:"condition"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	for k, v := range m {
		(*d)[k] = v.Condition
	}
	return nil
}

// loadCompose decodes docker-compose.yml strictly: a field the types above do
// not know fails the test, so that a typo never passes as "not checked".
func loadCompose(t *testing.T) compose {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return c
}

// mount finds the host path mounted at target in a service.
func (s service) mount(target string) (host string, ok bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0], true
		}
	}
	return "", false
}

// flag returns the value after name in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// gatewayConfig loads the config file compose mounts into the gateway.
func gatewayConfig(t *testing.T, c compose) *config.Config {
	t.Helper()
	gw, ok := c.Services["gateway"]
	if !ok {
		t.Fatal("no gateway service")
	}
	target := flagValue(gw.Command, "-config")
	if target == "" {
		t.Fatalf("gateway command %q has no -config FILE", gw.Command)
	}
	host, ok := gw.mount(target)
	if !ok {
		t.Fatalf("gateway: -config %s is not a mounted file (volumes %q)", target, gw.Volumes)
	}
	plan, err := gateway.Load(filepath.Join(root, host), func(string) string { return "" })
	if err != nil {
		t.Fatalf("gateway config %s: %v", host, err)
	}
	return plan.Config()
}

func TestComposeDependencies(t *testing.T) {
	c := loadCompose(t)
	for name, s := range c.Services {
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("services.%s.depends_on: %q is not a service", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("services.%s.volumes: %v", name, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("services.%s.volumes: named volume %q is not declared", name, src)
			}
		}
	}
	gw := c.Services["gateway"]
	for dep, cond := range map[string]string{"tinyurl": "service_healthy", "memcached": "service_started", "cassandra": "service_started"} {
		if got := gw.DependsOn[dep]; got != cond {
			t.Errorf("gateway depends_on %s: condition %q, want %q", dep, got, cond)
		}
	}
}

func TestComposeHealthchecks(t *testing.T) {
	c := loadCompose(t)
	installed := dockerfile(t).installed
	for name, s := range c.Services {
		h := s.Healthcheck
		if h == nil || len(h.Test) < 2 {
			t.Errorf("services.%s: no healthcheck", name)
			continue
		}
		switch h.Test[0] {
		case "CMD":
			if s.Build != nil && !slices.Contains(installed, h.Test[1]) {
				t.Errorf("services.%s.healthcheck: %s is not a binary the Dockerfile installs (%q)", name, h.Test[1], installed)
			}
		case "CMD-SHELL":
			if s.Build != nil {
				t.Errorf("services.%s.healthcheck: the image is distroless, it has no shell", name)
			}
		default:
			t.Errorf("services.%s.healthcheck.test: starts with %q, want CMD or CMD-SHELL", name, h.Test[0])
		}
	}
	// The probes ask the listeners the configs give.
	cfg := gatewayConfig(t, c)
	_, adminPort, _ := net.SplitHostPort(cfg.Admin.Listen)
	if want := "http://127.0.0.1:" + adminPort + "/readyz"; !slices.Contains(c.Services["gateway"].Healthcheck.Test, want) {
		t.Errorf("gateway healthcheck %q does not probe %s", c.Services["gateway"].Healthcheck.Test, want)
	}
	_, tinyPort, _ := net.SplitHostPort(flagValue(c.Services["tinyurl"].Command, "-listen"))
	if want := "http://127.0.0.1:" + tinyPort + "/healthz"; !slices.Contains(c.Services["tinyurl"].Healthcheck.Test, want) {
		t.Errorf("tinyurl healthcheck %q does not probe %s", c.Services["tinyurl"].Healthcheck.Test, want)
	}
}

// TestComposeConfigNamesServices checks that every address in the gateway's
// config is a compose service listening on that port.
func TestComposeConfigNamesServices(t *testing.T) {
	c := loadCompose(t)
	cfg := gatewayConfig(t, c)
	check := func(field, hostport string) {
		host, port, err := net.SplitHostPort(hostport)
		if err != nil {
			t.Errorf("%s: %q: %v", field, hostport, err)
			return
		}
		s, ok := c.Services[host]
		if !ok {
			t.Errorf("%s: %q is not a compose service", field, host)
			return
		}
		if !slices.Contains(s.Expose, port) {
			t.Errorf("%s: service %s does not expose port %s (expose %q)", field, host, port, s.Expose)
		}
	}
	if cfg.Limiter.Store != "memcached" {
		t.Errorf("limiter.store = %q, want memcached in compose", cfg.Limiter.Store)
	}
	for i, s := range cfg.Limiter.Memcached.Servers {
		check("limiter.memcached.servers["+strconv.Itoa(i)+"]", s)
	}
	if cfg.Analytics.Store != "cassandra" {
		t.Errorf("analytics.store = %q, want cassandra in compose", cfg.Analytics.Store)
	}
	for i, h := range cfg.Analytics.Cassandra.Hosts {
		check("analytics.cassandra.hosts["+strconv.Itoa(i)+"]", h)
	}
	for i, target := range cfg.Upstream.Targets {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		check("upstream.targets["+strconv.Itoa(i)+"]", u.Host)
		// The demo service listens where its expose says.
		if s, ok := c.Services[u.Hostname()]; ok && s.Command != nil {
			if _, port, _ := net.SplitHostPort(flagValue(s.Command, "-listen")); port != u.Port() {
				t.Errorf("upstream.targets[%d] port %s, but %s listens on %q", i, u.Port(), u.Hostname(), flagValue(s.Command, "-listen"))
			}
		}
	}
}

// TestComposeTrustsNoRange checks that the compose config believes
// forwarding and identity headers from no range of peers: clients reach the
// gateway through Docker's port publishing, which can show them with any
// address of the bridge network, so trusting a range (172.16.0.0/12 was the
// old value) lets any client set X-Forwarded-For and X-User-ID. Only single
// addresses, of a proxy that compose itself runs at a fixed address, may be
// trusted.
func TestComposeTrustsNoRange(t *testing.T) {
	c := loadCompose(t)
	cfg := gatewayConfig(t, c)
	fixed := map[netip.Addr]string{} // fixed addresses of compose services
	for name, s := range c.Services {
		for _, n := range s.Networks {
			for _, a := range []string{n.IPv4Address, n.IPv6Address} {
				if ip, err := netip.ParseAddr(a); err == nil {
					fixed[ip] = name
				}
			}
		}
	}
	for i, e := range cfg.Server.TrustedProxies {
		p, err := forwarded.ParsePrefix(e)
		if err != nil {
			t.Errorf("server.trusted_proxies[%d]: %v", i, err)
			continue
		}
		if !p.IsSingleIP() {
			t.Errorf("server.trusted_proxies[%d] = %v: a range of %d bits; trust single proxy addresses only", i, p, p.Addr().BitLen()-p.Bits())
			continue
		}
		if _, ok := fixed[p.Addr()]; !ok {
			t.Errorf("server.trusted_proxies[%d] = %v is not the fixed address of a compose service (fixed: %v)", i, p, fixed)
		}
	}
}

// TestComposeLoadsInCompose1 checks what Debian 12's own docker-compose
// (1.29.2) needs beyond what TestComposeDependencies decodes: it validates
// the file against the Compose Specification schema of its time, whose top
// level allows only these keys (a top-level "name" came later and fails
// there with "'name' does not match any of the regexes: '^x-'"). "version"
// is left out too: Compose v2 warns that it is obsolete.
func TestComposeLoadsInCompose1(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := yaml.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	allowed := []string{"services", "volumes", "networks", "secrets", "configs"}
	for k := range top {
		if !slices.Contains(allowed, k) && !strings.HasPrefix(k, "x-") {
			t.Errorf("docker-compose.yml: top-level %q: docker-compose 1.29 accepts only %q and x- extensions", k, allowed)
		}
	}
}

// TestCassandraRecipe checks the recipes for the Cassandra integration
// tests that README.md and docs/ give (docs/tests.md has one) against the
// compose file: every CASSANDRA_HOSTS address they give must be published
// by the cassandra service on the host's loopback, to the port the
// gateway's config connects to inside compose.
func TestCassandraRecipe(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var recipes [][][]byte
	for _, p := range append(pages, filepath.Join(root, "README.md")) {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		recipes = append(recipes, regexp.MustCompile(`CASSANDRA_HOSTS=(\S+)\s+\./test\.sh`).FindAllSubmatch(text, -1)...)
	}
	if len(recipes) == 0 {
		t.Fatal("neither README.md nor docs/ gives a CASSANDRA_HOSTS=... ./test.sh recipe")
	}
	c := loadCompose(t)
	cfg := gatewayConfig(t, c)
	_, inner, err := net.SplitHostPort(cfg.Analytics.Cassandra.Hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range recipes {
		for _, hostport := range strings.Split(string(m[1]), ",") {
			host, port, err := net.SplitHostPort(hostport)
			if err != nil {
				t.Errorf("docs: CASSANDRA_HOSTS=%s: %v", m[1], err)
				continue
			}
			if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
				t.Errorf("docs: CASSANDRA_HOSTS=%s: %s is not a loopback address", m[1], host)
			}
			want := host + ":" + port + ":" + inner
			if !slices.Contains(c.Services["cassandra"].Ports, want) {
				t.Errorf("docs: CASSANDRA_HOSTS=%s, but the cassandra service publishes %q, want %q", m[1], c.Services["cassandra"].Ports, want)
			}
		}
	}
	// Nothing else publishes the store on every interface of the host.
	for _, p := range c.Services["cassandra"].Ports {
		if ip, err := netip.ParseAddr(strings.Split(p, ":")[0]); err != nil || !ip.IsLoopback() {
			t.Errorf("cassandra port %q is not bound to the host's loopback", p)
		}
	}
}

// TestComposePorts checks that the published ports reach the gateway's
// listeners, which must listen on all interfaces inside the container.
func TestComposePorts(t *testing.T) {
	c := loadCompose(t)
	cfg := gatewayConfig(t, c)
	var published []string
	for _, p := range c.Services["gateway"].Ports {
		parts := strings.Split(p, ":") // [HOST_IP:]HOST:CONTAINER
		if len(parts) < 2 {
			t.Errorf("gateway port %q: want HOST:CONTAINER", p)
			continue
		}
		published = append(published, parts[len(parts)-1])
	}
	df := dockerfile(t)
	for field, listen := range map[string]string{"server.listen": cfg.Server.Listen, "admin.listen": cfg.Admin.Listen} {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			t.Fatal(err)
		}
		if host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("%s = %q: a container must listen on all interfaces to be published", field, listen)
		}
		if !slices.Contains(published, port) {
			t.Errorf("%s port %s is not published (ports %q)", field, port, c.Services["gateway"].Ports)
		}
		if !slices.Contains(df.expose, port) {
			t.Errorf("%s port %s is not in the Dockerfile's EXPOSE %q", field, port, df.expose)
		}
	}
	if tok := cfg.Admin.TokenEnv; tok != "" {
		if _, ok := c.Services["gateway"].Environment[tok]; !ok {
			t.Errorf("admin.token_env %s is not passed to the gateway's environment", tok)
		}
	}
}

// image is what the test reads from the Dockerfile.
type image struct {
	built      map[string]string // output path → ./cmd/NAME
	installed  []string          // paths of the built binaries in the final image
	user       string
	entrypoint []string
	expose     []string
	workdir    string
	owner      map[string]string // COPY destination → its --chown owner
}

func dockerfile(t *testing.T) image {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var stages [][]string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before FROM", line)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], line)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a final one", len(stages))
	}
	im := image{built: map[string]string{}, owner: map[string]string{}}
	goBuild := regexp.MustCompile(`go build [^&;]*?-o (\S+) (\./cmd/\S+)`)
	for _, st := range stages[:len(stages)-1] {
		for _, line := range st {
			for _, m := range goBuild.FindAllStringSubmatch(line, -1) {
				im.built[m[1]] = m[2]
			}
		}
	}
	for _, line := range stages[len(stages)-1] {
		word, rest, _ := strings.Cut(line, " ")
		fields := strings.Fields(rest)
		switch strings.ToUpper(word) {
		case "COPY":
			if len(fields) < 3 || !strings.HasPrefix(fields[0], "--from=") {
				continue
			}
			dest := fields[len(fields)-1]
			for _, f := range fields {
				if o, ok := strings.CutPrefix(f, "--chown="); ok {
					im.owner[dest] = o
				}
			}
			for _, src := range fields[1 : len(fields)-1] {
				if _, ok := im.built[src]; ok {
					if strings.HasSuffix(dest, "/") {
						im.installed = append(im.installed, dest+filepath.Base(src))
					} else {
						im.installed = append(im.installed, dest)
					}
				}
			}
		case "USER":
			im.user = rest
		case "WORKDIR":
			im.workdir = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &im.entrypoint); err != nil {
				t.Fatalf("Dockerfile ENTRYPOINT %s: want the exec (JSON) form: %v", rest, err)
			}
		case "EXPOSE":
			im.expose = append(im.expose, fields...)
		}
	}
	return im
}

func TestDockerfile(t *testing.T) {
	im := dockerfile(t)
	var cmds []string
	for _, pkg := range im.built {
		cmds = append(cmds, pkg)
		if _, err := os.Stat(filepath.Join(root, pkg, "main.go")); err != nil {
			t.Errorf("Dockerfile builds %s: %v", pkg, err)
		}
	}
	slices.Sort(cmds)
	if want := []string{"./cmd/gateway", "./cmd/tinyurl"}; !slices.Equal(cmds, want) {
		t.Errorf("Dockerfile builds %q, want %q", cmds, want)
	}
	if len(im.installed) != len(im.built) {
		t.Errorf("final image installs %q of the built %v", im.installed, im.built)
	}
	user, _, _ := strings.Cut(im.user, ":")
	if user == "" || user == "root" || user == "0" {
		t.Errorf("final image USER %q, want a non-root user", im.user)
	}
	if len(im.entrypoint) == 0 || !slices.Contains(im.installed, im.entrypoint[0]) {
		t.Errorf("ENTRYPOINT %q is not an installed binary %q", im.entrypoint, im.installed)
	}

	// Every service run from this image starts a binary the image has.
	c := loadCompose(t)
	for name, s := range c.Services {
		if s.Build == nil {
			if s.Image == "" {
				t.Errorf("services.%s: neither build nor image", name)
			}
			continue
		}
		ep := im.entrypoint
		if s.Entrypoint != nil {
			ep = s.Entrypoint
		}
		if len(ep) == 0 || !slices.Contains(im.installed, ep[0]) {
			t.Errorf("services.%s: entrypoint %q is not a binary the Dockerfile installs (%q)", name, ep, im.installed)
		}
	}
}

// TestComposeKeepsTheJournal: in the compose deployment, the journal of
// counts Cassandra has not taken yet lies on a named volume of the gateway
// service, so that it outlives a recreated container, and the image makes
// that folder its user's, so that a new volume starts writable for the
// gateway (Docker copies the image folder's owner into an empty volume).
func TestComposeKeepsTheJournal(t *testing.T) {
	c := loadCompose(t)
	im := dockerfile(t)
	dir := analytics.DefaultJournalPath(gatewayConfig(t, c).Analytics)
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(im.workdir, dir)
	}
	var vol, target string
	for _, v := range c.Services["gateway"].Volumes {
		parts := strings.Split(v, ":")
		named := len(parts) >= 2 && !strings.HasPrefix(parts[0], ".") && !strings.HasPrefix(parts[0], "/")
		if named && (dir == parts[1] || strings.HasPrefix(dir, parts[1]+"/")) {
			vol, target = parts[0], parts[1]
		}
	}
	if vol == "" {
		t.Fatalf("the gateway's journal %s is on no named volume of services.gateway (%q): it dies with the container", dir, c.Services["gateway"].Volumes)
	}
	if _, ok := c.Volumes[vol]; !ok {
		t.Errorf("volume %q is not declared at the top level", vol)
	}
	user, _, _ := strings.Cut(im.user, ":")
	if owner, _, _ := strings.Cut(im.owner[target], ":"); owner != user {
		t.Errorf("the image's %s is owned by %q, want the gateway's user %q: a new volume there would not be writable", target, owner, user)
	}
}

// TestConfigsLoad loads every config kept here, and checks that the quick
// start and compose configs keep the example's rules.
func TestConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs: %v", err)
	}
	cfgs := map[string]*config.Config{}
	for _, f := range files {
		// Compiled as check-config and start-up do.
		plan, err := gateway.Load(f, func(string) string { return "" })
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		cfgs[f] = plan.Config()
	}
	example := cfgs["gateway.example.yaml"]
	if example == nil {
		t.Fatal("gateway.example.yaml did not load")
	}
	for _, f := range []string{"gateway.quickstart.yaml", "gateway.compose.yaml"} {
		cfg := cfgs[f]
		if cfg == nil {
			t.Errorf("%s did not load", f)
			continue
		}
		if diff := cmp.Diff(example.Rules, cfg.Rules); diff != "" {
			t.Errorf("%s rules differ from the example's (-example +%s):\n%s", f, f, diff)
		}
	}
	if qs := cfgs["gateway.quickstart.yaml"]; qs != nil {
		// The quick start runs on one machine, beside go run ./cmd/tinyurl.
		want := []string{"http://127.0.0.1:8081"}
		if !slices.Equal(qs.Upstream.Targets, want) || qs.Limiter.Store != "memory" || qs.Analytics.Store != "embedded" {
			t.Errorf("quickstart: targets %q limiter %q analytics %q, want %q memory embedded",
				qs.Upstream.Targets, qs.Limiter.Store, qs.Analytics.Store, want)
		}
		for _, l := range []string{qs.Server.Listen, qs.Admin.Listen} {
			if host, _, _ := net.SplitHostPort(l); host != "127.0.0.1" {
				t.Errorf("quickstart listens on %s, want loopback only", l)
			}
		}
	}
}

// dockerignore reads the .dockerignore as Docker does (moby's
// patternmatcher, which both the classic builder and BuildKit use): each
// line a pattern cleaned as a path relative to the context's root, "!" for
// an exception, "*" and "?" within one path element, "**" across any
// number of them.
type dockerignore []ignorePattern

type ignorePattern struct {
	re        *regexp.Regexp
	exception bool
	text      string
}

func readDockerignore(t *testing.T) dockerignore {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var d dockerignore
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{text: line}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			p.exception, line = true, strings.TrimSpace(rest)
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		p.re = regexp.MustCompile(re.String())
		d = append(d, p)
	}
	return d
}

// excludes reports whether the file at rel (slash-separated, relative to
// the context) stays out of the build context: the last pattern that
// matches it or one of its parent folders decides.
func (d dockerignore) excludes(rel string) bool {
	out := false
	parts := strings.Split(rel, "/")
	for _, p := range d {
		match := false
		for i := range parts {
			if p.re.MatchString(strings.Join(parts[:i+1], "/")) {
				match = true
				break
			}
		}
		if match {
			out = !p.exception
		}
	}
	return out
}

// TestDockerignore: the build context that .dockerignore leaves builds the
// image's binaries. The files are copied through its rules into an empty
// folder, and the Dockerfile's own go build commands run there (CGO off, as
// in the image). A pattern
// that catches a package folder (once "gateway", meant for a binary at the
// root, which also matched the gateway/ package) fails here. What the demo
// and the quick start leave in the working tree (bin/ from demo.sh, data/
// from the embedded store and the demo's links) and .git stay out: tens of
// MB of binaries, and data that must not end up in an image.
func TestDockerignore(t *testing.T) {
	ig := readDockerignore(t)
	for _, p := range []string{"bin/gateway", "data/analytics/000001.log", ".git/HEAD", "gateway.test", "limit/x.test"} {
		if !ig.excludes(p) {
			t.Errorf(".dockerignore sends %s to the build context", p)
		}
	}
	if testing.Short() {
		t.Skip("-short: the build of the filtered context is left out")
	}
	ctx := t.TempDir()
	copied := 0
	err := filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ig.excludes(rel) {
			if e.IsDir() {
				return filepath.SkipDir // no exception patterns bring anything back
			}
			return nil
		}
		if e.IsDir() || !e.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(ctx, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		copied++
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range dockerCopies(t) {
		if _, err := os.Stat(filepath.Join(ctx, c)); err != nil {
			t.Errorf("the Dockerfile copies %s, which is not in the build context: %v", c, err)
		}
	}
	im := dockerfile(t)
	var pkgs []string
	for _, pkg := range im.built {
		pkgs = append(pkgs, pkg)
	}
	slices.Sort(pkgs)
	out := t.TempDir()
	// Built with the tests' own flags (the race detector when it is on, cgo
	// as the machine has it), not the image's CGO_ENABLED=0 and -trimpath:
	// what the context must hold is the same files, and so the
	// dependencies come from the build cache the tests filled instead of
	// a third build of them all.
	args := []string{"build", "-o", out + "/"}
	if testkit.Race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in the context .dockerignore leaves (%d files): %v\n%s", strings.Join(pkgs, " "), copied, err, b)
	}
	for _, pkg := range pkgs {
		if _, err := os.Stat(filepath.Join(out, filepath.Base(pkg))); err != nil {
			t.Errorf("%s was not built: %v", pkg, err)
		}
	}
}

// dockerCopies returns the sources of the Dockerfile's COPY instructions
// that read the build context (not --from another stage), "." included.
func dockerCopies(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.ReplaceAll(string(data), "\\\n", " "), "\n") {
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.EqualFold(word, "COPY") || strings.Contains(rest, "--from=") {
			continue
		}
		var args []string
		for _, f := range strings.Fields(rest) {
			if !strings.HasPrefix(f, "--") {
				args = append(args, f)
			}
		}
		if len(args) >= 2 {
			out = append(out, args[:len(args)-1]...)
		}
	}
	if len(out) == 0 {
		t.Fatal("Dockerfile: no COPY from the build context")
	}
	return out
}

// TestDockerfileClassicBuilder: the Dockerfile builds with the classic
// builder, which Debian 12's docker.io 20.10 and docker-compose 1.29.2 use
// unless DOCKER_BUILDKIT=1 is set: none of the instructions or flags only
// BuildKit knows (RUN --mount, COPY --link or --chmod, here-documents).
func TestDockerfileClassicBuilder(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	buildkitOnly := regexp.MustCompile(`(?i)^\s*(RUN\s+.*--(mount|network|security)=|(COPY|ADD)\s+.*--(link|chmod|parents|exclude|checksum|keep-git-dir)\b|.*<<-?\s*["']?[A-Z]+)`)
	for i, line := range strings.Split(string(data), "\n") {
		if buildkitOnly.MatchString(line) {
			t.Errorf("Dockerfile:%d: %q needs BuildKit; the classic builder of docker 20.10 and docker-compose 1.29 refuses it", i+1, line)
		}
	}
}
