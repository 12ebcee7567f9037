package visitor

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/mileusna/useragent"
)

// uaShards is the number of independently locked parts of the cache.
const uaShards = 32

// maxUABytes is the longest User-Agent kept in the cache; a longer one is
// parsed at every visit (real ones are a few hundred bytes).
const maxUABytes = 1024

// uaInfo is what a User-Agent says: the device class, browser and OS.
type uaInfo struct{ device, browser, os string }

// uaCache keeps parsed User-Agents, sharded by hash, each shard a map
// under a read-write lock; a full shard is emptied (the next visits parse
// again), so memory stays bounded whatever User-Agents clients make up.
type uaCache struct {
	seed   maphash.Seed
	per    int // entries per shard at most
	shards [uaShards]uaShard
}

type uaShard struct {
	mu sync.RWMutex
	m  map[string]uaInfo
	_  [40]byte // keep neighbouring shards' locks off one cache line
}

func newUACache(size int) *uaCache {
	c := &uaCache{seed: maphash.MakeSeed(), per: max(size/uaShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]uaInfo)
	}
	return c
}

// get returns what ua says, from the cache or parsed.
func (c *uaCache) get(ua string) uaInfo {
	s := &c.shards[maphash.String(c.seed, ua)%uaShards]
	s.mu.RLock()
	u, ok := s.m[ua]
	s.mu.RUnlock()
	if ok {
		return u
	}
	u = parseUA(ua)
	if len(ua) > maxUABytes {
		return u
	}
	s.mu.Lock()
	if len(s.m) >= c.per {
		clear(s.m)
	}
	s.m[strings.Clone(ua)] = u
	s.mu.Unlock()
	return u
}

// Known names, interned: the parser's names for the values the cache keeps
// are constants, except those of unknown browsers, which become "other".
var (
	browsers = []string{useragent.Chrome, useragent.Firefox, useragent.Safari, useragent.Edge, useragent.Opera,
		useragent.OperaMini, useragent.OperaTouch, useragent.Vivaldi, useragent.InternetExplorer, useragent.HeadlessChrome,
		useragent.SamsungBrowser, useragent.MobileSafari, useragent.FacebookApp, useragent.InstagramApp, useragent.TiktokApp,
		"YaBrowser", "UCBrowser", "Brave", "DuckDuckGo"}
	systems = []string{useragent.Windows, useragent.WindowsPhone, useragent.Android, useragent.MacOS, useragent.IOS,
		useragent.Linux, useragent.FreeBSD, useragent.ChromeOS, useragent.BlackBerry, useragent.Harmony}
)

// parseUA parses a User-Agent (github.com/mileusna/useragent).
func parseUA(ua string) uaInfo {
	if ua == "" {
		return uaInfo{Other, Other, Other}
	}
	p := useragent.Parse(ua)
	u := uaInfo{device: Other, browser: intern(p.Name, browsers), os: intern(p.OS, systems)}
	switch {
	case p.Bot:
		u.device = Bot
	case p.Tablet:
		u.device = Tablet
	case p.Mobile:
		u.device = Mobile
	case p.Desktop:
		u.device = Desktop
	}
	return u
}

// intern returns the element of known equal to s (so that no string of a
// request is kept), or Other.
func intern(s string, known []string) string {
	for _, k := range known {
		if k == s {
			return k
		}
	}
	return Other
}
