package analytics

import "fmt"

// BotPolicy is what the analytics middleware does with a bot visit: the
// "bots" setting.
type BotPolicy uint8

// The values of the "bots" setting.
const (
	BotsSeparate BotPolicy = iota // counted as bot visits, beside human ones
	BotsCount                     // counted as human visits
	BotsIgnore                    // not counted
)

// ParseBotPolicy parses "separate", "count" or "ignore".
func ParseBotPolicy(s string) (BotPolicy, error) {
	switch s {
	case "separate", "":
		return BotsSeparate, nil
	case "count":
		return BotsCount, nil
	case "ignore":
		return BotsIgnore, nil
	}
	return 0, fmt.Errorf("analytics: bots: %q is not separate, count or ignore", s)
}
