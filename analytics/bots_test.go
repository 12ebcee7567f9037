package analytics_test

import (
	"strings"
	"testing"

	"github.com/linkgate/linkgate/analytics"
)

var userAgents = []struct {
	name, ua string
	bot      bool
}{
	{"slack unfurl", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", true},
	{"slack image proxy", "Slack-ImgProxy (+https://api.slack.com/robots)", true},
	{"twitter", "Twitterbot/1.0", true},
	{"facebook", "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", true},
	{"mastodon", "http.rb/5.1.1 (Mastodon/4.2.1; +https://mastodon.social/)", true},
	{"discord", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.10; rv:38.0) Gecko/20100101 Firefox/38.0 (compatible; Discordbot/2.0; +https://discordapp.com)", true},
	{"telegram", "TelegramBot (like TwitterBot)", true},
	{"whatsapp", "WhatsApp/2.23.20.0 A", true},
	{"linkedin", "LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)", true},
	{"googlebot", "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.71 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", true},
	{"bingbot", "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", true},
	{"upper case", "SLACKBOT 1.0", true},
	{"pinterest fetcher", "Pinterest/0.2 (+https://www.pinterest.com/bot.html)", true},
	{"chrome", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", false},
	{"iphone safari", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1", false},
	{"pinterest in-app", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 [Pinterest/iOS]", false},
	{"cubot phone", "Mozilla/5.0 (Linux; Android 10; CUBOT_X30) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36", false},
	{"curl", "curl/8.5.0", false},
	{"empty", "", false},
	{"non-ascii", "Mozilla/5.0 ☃ İstanbul", false},
}

func TestIsBot(t *testing.T) {
	for _, tt := range userAgents {
		t.Run(tt.name, func(t *testing.T) {
			if got := analytics.IsBot(tt.ua); got != tt.bot {
				t.Errorf("IsBot(%q) = %v, want %v", tt.ua, got, tt.bot)
			}
			if got := isBotReference(tt.ua); got != tt.bot {
				t.Errorf("reference(%q) = %v, want %v: the table is wrong", tt.ua, got, tt.bot)
			}
		})
	}
}

// isBotReference is the obvious, slow IsBot.
func isBotReference(ua string) bool {
	lower := strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, ua)
	for _, p := range analytics.BotPatterns() {
		if strings.Contains(lower, strings.ToLower(p)) {
			return true
		}
	}
	return false
}

func TestBotPatterns(t *testing.T) {
	pats := analytics.BotPatterns()
	if len(pats) < 40 {
		t.Errorf("%d patterns, want the reviewed list", len(pats))
	}
	seen := map[string]bool{}
	for _, p := range pats {
		lp := strings.ToLower(p)
		if seen[lp] {
			t.Errorf("pattern %q listed twice", p)
		}
		seen[lp] = true
		if len(p) < 4 {
			t.Errorf("pattern %q is too short to be distinctive", p)
		}
		if !analytics.IsBot("x " + p + " y") {
			t.Errorf("IsBot misses its own pattern %q", p)
		}
	}
}

func FuzzIsBot(f *testing.F) {
	for _, tt := range userAgents {
		f.Add(tt.ua)
	}
	f.Add("xxSlackbo")
	f.Add("facebookexternalhi")
	f.Fuzz(func(t *testing.T, ua string) {
		if got, want := analytics.IsBot(ua), isBotReference(ua); got != want {
			t.Errorf("IsBot(%q) = %v, reference %v", ua, got, want)
		}
	})
}

func BenchmarkBotMatch(b *testing.B) {
	for _, tt := range []struct{ name, ua string }{
		{"chrome", userAgents[13].ua},
		{"googlebot", userAgents[9].ua},
		{"slackbot", userAgents[0].ua},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tt.ua)))
			for b.Loop() {
				analytics.IsBot(tt.ua)
			}
		})
	}
	b.Run("reference/chrome", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			isBotReference(userAgents[13].ua)
		}
	})
}
