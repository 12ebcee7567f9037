package analytics

import "testing"

func TestParseBotPolicy(t *testing.T) {
	for s, want := range map[string]BotPolicy{"separate": BotsSeparate, "": BotsSeparate, "count": BotsCount, "ignore": BotsIgnore} {
		if got, err := ParseBotPolicy(s); err != nil || got != want {
			t.Errorf("ParseBotPolicy(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseBotPolicy("Separate"); err == nil {
		t.Error("ParseBotPolicy(Separate): no error")
	}
}
