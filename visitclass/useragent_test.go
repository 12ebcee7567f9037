package visitclass_test

import (
	"strings"
	"testing"

	"github.com/linkgate/linkgate/visitclass"
)

var userAgents = []struct {
	name, ua string
	want     visitclass.Reason
}{
	{"slack unfurl", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", visitclass.PreviewUA},
	{"slack image proxy", "Slack-ImgProxy (+https://api.slack.com/robots)", visitclass.PreviewUA},
	{"twitter", "Twitterbot/1.0", visitclass.PreviewUA},
	{"facebook", "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", visitclass.PreviewUA},
	{"mastodon", "http.rb/5.1.1 (Mastodon/4.2.1; +https://mastodon.social/)", visitclass.PreviewUA},
	{"discord", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.10; rv:38.0) Gecko/20100101 Firefox/38.0 (compatible; Discordbot/2.0; +https://discordapp.com)", visitclass.PreviewUA},
	{"telegram", "TelegramBot (like TwitterBot)", visitclass.PreviewUA},
	{"whatsapp", "WhatsApp/2.23.20.0 A", visitclass.PreviewUA},
	{"linkedin", "LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)", visitclass.PreviewUA},
	{"googlebot", "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.71 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", visitclass.BotUA},
	{"bingbot", "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", visitclass.BotUA},
	{"upper case", "SLACKBOT 1.0", visitclass.PreviewUA},
	{"pinterest fetcher", "Pinterest/0.2 (+https://www.pinterest.com/bot.html)", visitclass.PreviewUA},
	{"chrome", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", visitclass.None},
	{"iphone safari", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1", visitclass.None},
	{"pinterest in-app", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 [Pinterest/iOS]", visitclass.None},
	{"cubot phone", "Mozilla/5.0 (Linux; Android 10; CUBOT_X30) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36", visitclass.None},
	{"curl", "curl/8.5.0", visitclass.None},
	{"empty", "", visitclass.None},
	{"non-ascii", "Mozilla/5.0 ☃ İstanbul", visitclass.None},
}

func TestByUserAgent(t *testing.T) {
	for _, tt := range userAgents {
		t.Run(tt.name, func(t *testing.T) {
			if got := visitclass.ByUserAgent(tt.ua); got != tt.want {
				t.Errorf("ByUserAgent(%q) = %v, want %v", tt.ua, got, tt.want)
			}
			if got := byUserAgentReference(tt.ua); got != tt.want {
				t.Errorf("reference(%q) = %v, want %v: the table is wrong", tt.ua, got, tt.want)
			}
		})
	}
}

// byUserAgentReference is the obvious, slow ByUserAgent: the first
// section's pattern the User-Agent contains.
func byUserAgentReference(ua string) visitclass.Reason {
	lower := strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, ua)
	best := visitclass.None
	for _, p := range visitclass.Patterns() {
		if !strings.Contains(lower, strings.ToLower(p.Text)) {
			continue
		}
		r := visitclass.BotUA
		if p.Class == visitclass.Preview {
			r = visitclass.PreviewUA
		}
		if best == visitclass.None || r < best {
			best = r
		}
	}
	return best
}

func TestPatterns(t *testing.T) {
	pats := visitclass.Patterns()
	if len(pats) < 40 {
		t.Errorf("%d patterns, want the reviewed list", len(pats))
	}
	seen := map[string]bool{}
	for _, pat := range pats {
		p := pat.Text
		lp := strings.ToLower(p)
		if seen[lp] {
			t.Errorf("pattern %q listed twice", p)
		}
		seen[lp] = true
		if len(p) < 4 {
			t.Errorf("pattern %q is too short to be distinctive", p)
		}
		if visitclass.ByUserAgent("x "+p+" y") == visitclass.None {
			t.Errorf("ByUserAgent misses its own pattern %q", p)
		}
	}
}

func FuzzByUserAgent(f *testing.F) {
	for _, tt := range userAgents {
		f.Add(tt.ua)
	}
	f.Add("xxSlackbo")
	f.Add("facebookexternalhi")
	f.Fuzz(func(t *testing.T, ua string) {
		if got, want := visitclass.ByUserAgent(ua), byUserAgentReference(ua); got != want {
			t.Errorf("ByUserAgent(%q) = %v, reference %v", ua, got, want)
		}
	})
}

func BenchmarkByUserAgent(b *testing.B) {
	for _, tt := range []struct{ name, ua string }{
		{"chrome", userAgents[13].ua},
		{"googlebot", userAgents[9].ua},
		{"slackbot", userAgents[0].ua},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tt.ua)))
			for b.Loop() {
				visitclass.ByUserAgent(tt.ua)
			}
		})
	}
	b.Run("reference/chrome", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			byUserAgentReference(userAgents[13].ua)
		}
	})
}
