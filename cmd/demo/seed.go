package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/linkgate/linkgate/config"
)

// The made-up traffic: which links, from where, with what. Weights are
// shares out of their sum.
var (
	links = []weighted{{"go", 5}, {"gh", 3}, {"ex", 2}} // cmd/tinyurl's links

	referrers = []weighted{
		{"", 30}, // typed, or an app without a Referer: "direct"
		{"https://news.ycombinator.com/item?id=1", 20},
		{"https://www.google.com/", 15},
		{"https://t.co/aBcD1234", 12},
		{"https://www.reddit.com/r/golang/", 10},
		{"https://mail.example.com/inbox", 5},
	}
	// sources are query strings naming where a link was shared (the
	// default analytics.dimensions.source_params).
	sources = []weighted{{"", 80}, {"utm_source=newsletter", 12}, {"src=qr", 8}}

	browsers = []weighted{
		{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", 28},
		{"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", 22},
		{"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36", 16},
		{"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", 14},
		{"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", 8},
		{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", 7},
		{"Mozilla/5.0 (iPad; CPU OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", 5},
	}
	// bots are a crawler and the link previews of chat and social apps:
	// counted apart from people (analytics.bots: separate).
	bots = []weighted{
		{"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", 3},
		{"Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", 3},
		{"facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", 2},
		{"Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)", 2},
		{"Twitterbot/1.0", 1},
	}
)

const (
	seedVisits   = 240             // the first burst: a few minutes of a link service's traffic
	seedVisitors = 90              // people: each visits one link or several, once or again
	botShare     = 0.08            // of the visits
	trickleEvery = 3 * time.Second // after the burst, a visit this often
	readyWithin  = 2 * time.Minute // for the gateway's first healthy upstream
)

type weighted struct {
	value  string
	weight int
}

// pick returns one of ws by weight.
func pick(r *rand.Rand, ws []weighted) string {
	total := 0
	for _, w := range ws {
		total += w.weight
	}
	n := r.IntN(total)
	for _, w := range ws {
		if n -= w.weight; n < 0 {
			return w.value
		}
	}
	return ws[len(ws)-1].value
}

// person is a visitor: an address in one of countries and a browser.
type person struct{ addr, ua string }

// seeder sends visits to a gateway.
type seeder struct {
	base   string // the gateway's URL, http://host:port
	client *http.Client
	rand   *rand.Rand
	people []person
}

// seed waits for the gateway of -config, visits, makes a share link,
// prints the URLs, and visits now and then for -for.
func seed(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo seed", flag.ContinueOnError)
	fs.SetOutput(stdout)
	path := fs.String("config", "data/demo/gateway.yaml", "the demo gateway's config (demo prepare writes it)")
	trickle := fs.Duration("for", 10*time.Minute, "how long to go on visiting after the first burst, one visit every 3 s; 0: not at all")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("seed: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	s := newSeeder("http://"+cfg.Server.Listen, rand.New(rand.NewPCG(1, 2)))
	admin := "http://" + cfg.Admin.Listen
	if err := s.waitReady(ctx, admin+"/readyz"); err != nil {
		return err
	}
	humans, robots, err := s.visits(ctx, seedVisits)
	if err != nil {
		return err
	}
	share, err := s.share(ctx, admin, os.Getenv(cfg.Admin.TokenEnv), "go")
	if err != nil {
		return err
	}
	stats := s.base + cfg.Stats.Prefix
	var keys []string
	for _, l := range links {
		keys = append(keys, l.value)
	}
	fmt.Fprintf(stdout, "demo: %d visits to %s from %d people in %d countries, on %d browsers, from referrers and shared links, and %d from a crawler and link previews\n",
		humans, strings.Join(keys, ", "), len(s.people), s.countries(), len(browsers), robots)
	fmt.Fprintf(stdout, "demo: link page: %s/go\n", stats)
	fmt.Fprintf(stdout, "demo: all links: %s\n", stats)
	fmt.Fprintf(stdout, "demo: share link (read-only, no token needed; until %s): %s%s\n", share.Expires.UTC().Format("2006-01-02 15:04 MST"), s.base, share.Page)
	if *trickle <= 0 {
		return nil
	}
	fmt.Fprintf(stdout, "demo: a visit every %v for %v: watch the live view\n", trickleEvery, *trickle)
	ctx, cancel := context.WithTimeout(ctx, *trickle)
	defer cancel()
	tick := time.NewTicker(trickleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if _, _, err := s.visits(ctx, 1); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

func newSeeder(base string, r *rand.Rand) *seeder {
	s := &seeder{
		base: base, rand: r,
		client: &http.Client{
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	var nets []weighted
	for _, c := range countries {
		nets = append(nets, weighted{c.cidr, c.weight})
	}
	for range seedVisitors {
		s.people = append(s.people, person{addr: address(r, pick(r, nets)), ua: pick(r, browsers)})
	}
	return s
}

// countries returns how many of the countries the people come from.
func (s *seeder) countries() int {
	in := map[string]bool{}
	for _, p := range s.people {
		for _, c := range countries {
			if c.code != "" && netip.MustParsePrefix(c.cidr).Contains(netip.MustParseAddr(p.addr)) {
				in[c.code] = true
			}
		}
	}
	return len(in)
}

// address returns a random host address of the network cidr, one of the
// first 65,536.
func address(r *rand.Rand, cidr string) string {
	p := netip.MustParsePrefix(cidr)
	b := p.Addr().AsSlice()
	hosts := 1 << min(len(b)*8-p.Bits(), 16)
	host := 1 + r.IntN(hosts-2) // neither the network's first address nor its last
	b[len(b)-2] |= byte(host >> 8)
	b[len(b)-1] |= byte(host)
	a, _ := netip.AddrFromSlice(b)
	return a.String()
}

// waitReady polls the admin listener's /readyz until the gateway has a
// healthy upstream.
func (s *seeder) waitReady(parent context.Context, url string) error {
	ctx, cancel := context.WithTimeout(parent, readyWithin)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := s.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return parent.Err() // stopped
			}
			return fmt.Errorf("seed: %s did not answer 200 within %v: no visits made", url, readyWithin)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// visits sends n visits, people's and bots', and returns how many of each
// the gateway redirected.
func (s *seeder) visits(ctx context.Context, n int) (humans, robots int, err error) {
	for range n {
		link := pick(s.rand, links)
		p := s.people[s.rand.IntN(len(s.people))]
		bot := s.rand.Float64() < botShare
		if bot {
			p.ua = pick(s.rand, bots)
		}
		target := s.base + "/" + link
		if q := pick(s.rand, sources); q != "" {
			target += "?" + q
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return humans, robots, err
		}
		req.Header.Set("User-Agent", p.ua)
		req.Header.Set("X-Forwarded-For", p.addr)
		if ref := pick(s.rand, referrers); ref != "" && !bot {
			req.Header.Set("Referer", ref)
		}
		if !bot {
			// What a person's browser sends with a click: the gateway
			// takes a browser's User-Agent without them for a scanner's.
			req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
			req.Header.Set("Accept-Language", "en-US,en;q=0.9")
			req.Header.Set("Sec-Fetch-Mode", "navigate")
			req.Header.Set("Sec-Fetch-Dest", "document")
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return humans, robots, fmt.Errorf("seed: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			return humans, robots, fmt.Errorf("seed: GET %s answered %s, want 302 Found", target, resp.Status)
		}
		if bot {
			robots++
		} else {
			humans++
		}
	}
	return humans, robots, nil
}

// shared is what POST /admin/share answers that the demo prints.
type shared struct {
	Page    string    `json:"page"`
	Expires time.Time `json:"expires"`
}

// share makes a share link to key's page with the admin API.
func (s *seeder) share(ctx context.Context, admin, token, key string) (shared, error) {
	if token == "" {
		return shared{}, errors.New("seed: no admin token in the environment: no share link")
	}
	form := url.Values{"short_key": {key}, "ttl": {"7d"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/admin/share", strings.NewReader(form.Encode()))
	if err != nil {
		return shared{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.client.Do(req)
	if err != nil {
		return shared{}, fmt.Errorf("seed: share link: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return shared{}, fmt.Errorf("seed: share link: POST /admin/share answered %s: %s", resp.Status, body)
	}
	var sh shared
	if err := json.Unmarshal(body, &sh); err != nil || sh.Page == "" {
		return shared{}, fmt.Errorf("seed: share link: an answer without its page: %s", body)
	}
	return sh, nil
}
